"""pytest-xdist scheduling for this suite (``pytest -n N --dist loadfile``, as ``make unit`` runs
it): each test file is one unit of work, so a module's fixtures (an exported model, a completed
graph) are built once, and every test marked ``mpi`` joins one more unit, so one worker runs the
mpiexec jobs one after another while the others run the numpy tests. Two jobs at once would
oversubscribe the cores twice over and slow both. Tests marked ``xdist_group(name)`` form one unit
per name: files that share a session-scoped fixture (tests/conformance's ``compared``, a minute of
CPU) mark themselves with one group, so one worker builds it once per run instead of each worker
once.

xdist's own ``--dist loadgroup`` would send tests marked ``xdist_group`` to one worker by adding
the group to their node ids, which pytest 9.2 no longer lets a plugin do: the mark is then
ignored without a word (pytest-dev/pytest-xdist#1386). So each worker writes the unit of each of
its tests marked ``mpi`` or ``xdist_group`` into a folder of the run, and the controller's
scheduler reads them.

tests/conftest.py registers this module as a plugin where xdist is installed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

#: the unit of work that holds every MPI test
MPI_UNIT = "mpi tests"
#: the mark that puts tests of several files into one unit (xdist's name for it)
GROUP_MARK = "xdist_group"
#: ``workerinput`` key: the folder where the workers write the units of their tests
_IDS_DIR = "spmdrules_mpi_ids_dir"
_RUN_DIR = pytest.StashKey[Path]()


class MpiTestsTogether(LoadScopeScheduling):
    """xdist's load-by-scope scheduling with a scope per file, one for all the MPI tests
    (scheduled first: the largest unit, so it never ends the run alone) and one per
    ``xdist_group`` name."""

    def __init__(self, config: pytest.Config, log: object, ids_dir: Path) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self.ids_dir = ids_dir
        self.units: dict[str, str] | None = None

    def schedule(self) -> None:
        if self.units is None:
            lists = sorted(self.ids_dir.glob("*.ids"))
            if not lists:
                raise RuntimeError(f"no worker wrote the units of its tests into {self.ids_dir}"
                                   " (tests/support/xdist_mpi.py)")
            pairs = (ln.split("\t", 1) for f in lists for ln in f.read_text().splitlines() if ln)
            self.units = {nodeid: unit for unit, nodeid in pairs}
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        assert self.units is not None
        return self.units.get(nodeid) or nodeid.split("::", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and config.getvalue("dist") == "loadfile":
        config.stash[_RUN_DIR] = Path(tempfile.mkdtemp(prefix="spmdrules-xdist-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    run_dir = config.stash.get(_RUN_DIR, None)
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: WorkerController) -> None:
    run_dir = node.config.stash.get(_RUN_DIR, None)
    if run_dir is not None:
        node.workerinput[_IDS_DIR] = str(run_dir)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own choice for loadfile
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> MpiTestsTogether | None:
    run_dir = config.stash.get(_RUN_DIR, None)
    return None if run_dir is None else MpiTestsTogether(config, log, run_dir)


def unit_of(item: pytest.Item, mpi_marker: str) -> str | None:
    """The unit of work ``item`` joins beyond its file's: every MPI test one, every
    ``xdist_group`` name one; None for a test that goes with its file."""
    if item.get_closest_marker(mpi_marker) is not None:
        return MPI_UNIT
    group = item.get_closest_marker(GROUP_MARK)
    if group is None:
        return None
    # as xdist's loadgroup reads the mark: a mark without a name joins the group "default"
    return f"group {group.args[0] if group.args else group.kwargs.get('name', 'default')}"


def record_units(config: pytest.Config, items: list[pytest.Item], mpi_marker: str) -> None:
    """In a worker of a ``--dist loadfile`` run: write the unit of each test that does not go
    with its file where the controller's scheduler reads it (whole, through a rename)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or _IDS_DIR not in workerinput:
        return
    units = {item.nodeid: unit_of(item, mpi_marker) for item in items}
    folder = Path(workerinput[_IDS_DIR])
    part = folder / f"{workerinput['workerid']}.part"
    part.write_text("".join(f"{u}\t{i}\n" for i, u in units.items() if u is not None))
    os.replace(part, folder / f"{workerinput['workerid']}.ids")
