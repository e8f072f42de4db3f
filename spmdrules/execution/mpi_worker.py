"""``mpiexec -n N python -m spmdrules.execution.mpi_worker JOB_DIR [TIMEOUT]``: one rank of
:func:`~spmdrules.execution.mpi_run.run_mpi`.

The job directory holds ``program.pkl`` (a lowered :class:`~spmdrules.execution.lowering.Program`),
``feeds.pkl`` (global source values) and ``fetch.json`` (tensor names to bring back); this
process's own launcher wrote them, so unpickling them trusts nothing foreign. Rank 0 writes
``values.pkl`` (the fetched global values) and ``report.pkl`` (bytes summed over ranks, the
slowest rank's seconds). Any failure on any rank prints the rank and the traceback and aborts
the whole job, so no rank waits forever for a partner that died; a rank that gets to the end
leaves its completion marker (:func:`spmdrules.execution.launch.mark_done`), so a rank that
vanished half-way cannot make the job look successful. With ``TIMEOUT`` (seconds), a watchdog
covers the whole of the rank's work, from loading the job to the last report: a job not done
by then is aborted, the rank that holds the others up named with its place.
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        from spmdrules.core.plugins import load_plugins
        from spmdrules.execution.mpi import MPIExecutor
        from spmdrules.execution.mpi_faults import watched
        from spmdrules.runtime.progress import at

        job = Path(argv[0])
        timeout = float(argv[1]) if len(argv) > 1 else None
        with watched(comm, timeout, "the run_mpi job"):
            at("setup: loading the plugins")
            # the program names its ops' kernels; a plugin's are registered only once it loads
            load_plugins()
            at("setup: loading the job")
            with open(job / "program.pkl", "rb") as f:
                program = pickle.load(f)
            with open(job / "feeds.pkl", "rb") as f:
                feeds = pickle.load(f)
            names = json.loads((job / "fetch.json").read_text())
            ex = MPIExecutor(program, comm)
            blocks, report = ex.run(feeds)
            at("fetching the results")
            t0 = time.perf_counter()
            values = ex.fetch(blocks, names)
            report.seconds["fetch"] = time.perf_counter() - t0
            at("gathering the ranks' reports")
            total = ex.reduce_reports(report)
        if comm.Get_rank() == 0:
            assert values is not None and total is not None
            with open(job / "values.pkl", "wb") as f:
                pickle.dump(values, f)
            with open(job / "report.pkl", "wb") as f:
                pickle.dump(total, f)
    except BaseException as e:
        from spmdrules.runtime.abort import fail

        fail(e, comm, "spmdrules.execution.mpi_worker")
    from spmdrules.execution.launch import mark_done

    mark_done()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
