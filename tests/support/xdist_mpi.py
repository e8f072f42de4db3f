"""pytest-xdist scheduling for this suite (``pytest -n N --dist loadfile``, as ``make unit`` runs
it): each test file is one unit of work, so a module's fixtures (an exported model, a completed
graph) are built once, and every test marked ``mpi`` joins one more unit, so one worker runs the
mpiexec jobs one after another while the others run the numpy tests. Two jobs at once would
oversubscribe the cores twice over and slow both.

xdist's own ``--dist loadgroup`` would send tests marked ``xdist_group`` to one worker by adding
the group to their node ids, which pytest 9.2 no longer lets a plugin do: the mark is then
ignored without a word (pytest-dev/pytest-xdist#1386). So each worker writes the ids of its tests
marked ``mpi`` into a folder of the run, and the controller's scheduler reads them.

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
#: ``workerinput`` key: the folder where the workers write their MPI tests' ids
_IDS_DIR = "spmdrules_mpi_ids_dir"
_RUN_DIR = pytest.StashKey[Path]()


class MpiTestsTogether(LoadScopeScheduling):
    """xdist's load-by-scope scheduling with a scope per file, and one for all the MPI tests
    (scheduled first: the largest unit, so it never ends the run alone)."""

    def __init__(self, config: pytest.Config, log: object, ids_dir: Path) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self.ids_dir = ids_dir
        self.mpi_ids: frozenset[str] | None = None

    def schedule(self) -> None:
        if self.mpi_ids is None:
            lists = sorted(self.ids_dir.glob("*.ids"))
            if not lists:
                raise RuntimeError(f"no worker wrote the ids of its MPI tests into {self.ids_dir}"
                                   " (tests/support/xdist_mpi.py)")
            self.mpi_ids = frozenset(i for f in lists for i in f.read_text().splitlines() if i)
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        assert self.mpi_ids is not None
        return MPI_UNIT if nodeid in self.mpi_ids else nodeid.split("::", 1)[0]


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


def record_mpi_tests(config: pytest.Config, ids: list[str]) -> None:
    """In a worker of a ``--dist loadfile`` run: write the ids of the tests marked mpi where the
    controller's scheduler reads them (whole, through a rename)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or _IDS_DIR not in workerinput:
        return
    folder = Path(workerinput[_IDS_DIR])
    part = folder / f"{workerinput['workerid']}.part"
    part.write_text("".join(f"{i}\n" for i in ids))
    os.replace(part, folder / f"{workerinput['workerid']}.ids")
