"""pytest-xdist scheduling for this suite (``pytest -n N --dist loadfile``, as ``make unit`` runs
it): each test file is one unit of work, so a module's fixtures (an exported model, a completed
graph) are built once. Tests marked ``xdist_group(name)`` form one unit per name: files that
share a session-scoped fixture (tests/conformance's ``compared``, a minute of CPU) mark
themselves with one group, so one worker builds it once per run instead of each worker once.

MPI tests go with their files, so they spread over the workers, but their jobs take turns
(:func:`mpi_turn`): at most ``JOB_SLOTS`` jobs run at once, and a test marked
``mpi(alone=True)`` (the 48-rank job) runs with no other job beside it. So the run never holds
more ranks at once than its largest job, as when one worker ran every MPI test.

xdist's own ``--dist loadgroup`` would send tests marked ``xdist_group`` to one worker by adding
the group to their node ids, which pytest 9.2 no longer lets a plugin do: the mark is then
ignored without a word (pytest-dev/pytest-xdist#1386). So each worker writes the unit of each of
its tests marked ``xdist_group`` into a folder of the run, and the controller's scheduler reads
them; the MPI turns are file locks in that folder.

tests/conftest.py registers this module as a plugin where xdist is installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

#: MPI jobs that may run at once over the run's workers (each oversubscribes the cores)
JOB_SLOTS = 2
#: seconds between two looks for a free job slot
SLOT_POLL = 0.05
#: the mark that puts tests of several files into one unit (xdist's name for it)
GROUP_MARK = "xdist_group"
#: ``workerinput`` key: the folder where the workers write the units of their tests
_IDS_DIR = "spmdrules_mpi_ids_dir"
_RUN_DIR = pytest.StashKey[Path]()


class GroupedFiles(LoadScopeScheduling):
    """xdist's load-by-scope scheduling with a scope per file and one per ``xdist_group``
    name."""

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
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> GroupedFiles | None:
    run_dir = config.stash.get(_RUN_DIR, None)
    return None if run_dir is None else GroupedFiles(config, log, run_dir)


def unit_of(item: pytest.Item) -> str | None:
    """The unit of work ``item`` joins beyond its file's: every ``xdist_group`` name one; None
    for a test that goes with its file."""
    group = item.get_closest_marker(GROUP_MARK)
    if group is None:
        return None
    # as xdist's loadgroup reads the mark: a mark without a name joins the group "default"
    return f"group {group.args[0] if group.args else group.kwargs.get('name', 'default')}"


def _run_dir(config: pytest.Config) -> Path | None:
    """In a worker of a ``--dist loadfile`` run: the run's folder."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or _IDS_DIR not in workerinput:
        return None
    return Path(workerinput[_IDS_DIR])


def record_units(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker of a ``--dist loadfile`` run: write the unit of each test that does not go
    with its file where the controller's scheduler reads it (whole, through a rename)."""
    folder = _run_dir(config)
    if folder is None:
        return
    workerinput = config.workerinput  # type: ignore[attr-defined]
    units = {item.nodeid: unit_of(item) for item in items}
    part = folder / f"{workerinput['workerid']}.part"
    part.write_text("".join(f"{u}\t{i}\n" for i, u in units.items() if u is not None))
    os.replace(part, folder / f"{workerinput['workerid']}.ids")


@contextlib.contextmanager
def mpi_turn(config: pytest.Config, *, alone: bool) -> Iterator[None]:
    """Hold one of the run's ``JOB_SLOTS`` job slots (``alone``: every slot) while an MPI test
    runs; outside a worker of a ``--dist loadfile`` run there is one process, and no turn.

    A test waiting to run alone holds the gate, so tests that come after it wait behind it
    instead of taking the slots as they free up (it would wait for ever on a worker that runs
    MPI tests back to back). Each lock is an ``flock`` on a file of the run's folder: the
    system drops it when its process ends, however it ends."""
    folder = _run_dir(config)
    if folder is None:
        yield
        return
    with contextlib.ExitStack() as held:
        with open(folder / "mpi.gate", "a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            slots = [held.enter_context(open(folder / f"mpi.slot{i}", "a"))
                     for i in range(JOB_SLOTS)]
            if alone:
                for slot in slots:
                    fcntl.flock(slot, fcntl.LOCK_EX)
            else:
                while not _take_one(slots):
                    time.sleep(SLOT_POLL)
        yield


def _take_one(slots: list[io.TextIOWrapper]) -> bool:
    """Lock a free slot (its lock goes with the file, closed by the caller's stack)."""
    for i, slot in enumerate(slots):
        try:
            fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        for other in slots[:i] + slots[i + 1:]:
            other.close()
        return True
    return False
