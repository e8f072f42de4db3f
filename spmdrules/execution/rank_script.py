"""``mpiexec -n N python -m spmdrules.execution.rank_script SCRIPT [ARGS...]``: one rank of a
script that the spmdrules launcher runs (:mod:`spmdrules.execution.launch`).

The script runs as ``__main__``. If it raises, this rank prints its rank and error and aborts
the whole job (:func:`spmdrules.runtime.abort.abort_on_error`), so no other rank waits for it;
if it returns, the rank leaves its completion marker, so a rank that vanished half-way is told
apart from one that finished.
"""

from __future__ import annotations

import runpy
import sys


def main(argv: list[str]) -> int:
    from spmdrules.core.plugins import load_plugins
    from spmdrules.execution.launch import mark_done
    from spmdrules.runtime.abort import abort_on_error
    from spmdrules.runtime.progress import at

    script = argv[0]
    sys.argv = list(argv)
    at(f"the script {script}")  # the first place, in the launcher's report of a stuck job
    with abort_on_error(where=script):
        load_plugins()  # the script may run ops that plugins register, as its launcher does
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                raise
            # the script chose to end here, successfully
    mark_done()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
