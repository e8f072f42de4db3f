"""Fixtures shared by every test directory. (tests/ is no package: pytest imports test files
with importlib. Shared modules live in tests/support, which pytest puts on the path; helpers
that need pytest live here as fixtures.)"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
# Hypothesis' deadline (200 ms a draw) is a timing assertion: on 2 shared cores beside MPI jobs a
# correct draw takes longer (263 ms for test_balanced_decomposition_tiles_the_axis at a load of
# 40). Every other setting stays the current profile's (CI's, derandomized, where CI is set).
settings.register_profile("spmdrules", parent=settings(), deadline=None)
settings.load_profile("spmdrules")
# the suite's checks over every registered op see the package's own: a command run in this
# process loads no installed plugin (tests/plugins/ runs them in processes of their own)
os.environ["SPMDRULES_DISABLE_PLUGIN_AUTOLOAD"] = "1"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_SHOWN = re.compile(r"^```text\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"^prints `(.*?)`", re.M)


@dataclass(frozen=True)
class MarkdownPage:
    """A documentation page whose ```python blocks run top to bottom in one namespace, and whose
    ```text blocks and lines starting "prints `...`" show what they print."""

    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text()

    @property
    def blocks(self) -> list[str]:
        return _BLOCK.findall(self.text)

    @property
    def shown(self) -> list[str]:
        """Every line the page says its examples print."""
        lines = [ln.rstrip() for s in _SHOWN.findall(self.text) for ln in s.strip().splitlines()]
        return lines + _INLINE.findall(self.text)

    def run(self) -> str:
        """Execute every block in order; return what they printed."""
        namespace: dict[str, object] = {"__name__": f"docs_{self.path.stem}"}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for i, block in enumerate(self.blocks):
                exec(compile(block, f"{self.path.name}[block {i}]", "exec"), namespace)
        return out.getvalue()

    def check(self, *, min_blocks: int, min_shown: int = 0) -> None:
        """Run the page and assert that every line it shows was printed."""
        assert len(self.blocks) >= min_blocks, f"{self.path.name}: too few examples"
        shown = self.shown
        assert len(shown) >= min_shown, f"{self.path.name}: too few shown outputs"
        printed = self.run()
        for line in shown:
            assert line in printed, f"{self.path.name} shows {line!r}, which was not printed"


@pytest.fixture
def doc_page() -> type[MarkdownPage]:
    """``doc_page(ROOT / "docs" / "x.md").check(min_blocks=...)``."""
    return MarkdownPage


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def _shm_segments() -> set[str]:
    shm = Path("/dev/shm")
    return {str(p) for p in shm.glob("mpich_shm_*")} if shm.is_dir() else set()


# -- MPI tests: marked, run in turns under xdist, skipped where there is no mpiexec ---------------
MPI_MARKER = "mpi"
NO_MPIEXEC = ("no mpiexec next to {python} or on PATH: install the mpi extra "
              "(pip install -e '.[mpi]') to run the tests marked mpi")


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        import xdist_mpi

        config.pluginmanager.register(xdist_mpi, "spmdrules-xdist-mpi")
    else:  # xdist registers it; without xdist the mark only documents a shared fixture
        config.addinivalue_line("markers", "xdist_group(name): tests of one unit of work under "
                                "xdist (tests/support/xdist_mpi.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from spmdrules.execution.launch import mpiexec_path

    mpi = [item for item in items if item.get_closest_marker(MPI_MARKER) is not None]
    if mpiexec_path() is None:
        for item in mpi:
            item.add_marker(pytest.mark.skip(reason=NO_MPIEXEC.format(python=sys.executable)))
    if config.pluginmanager.has_plugin("spmdrules-xdist-mpi"):
        import xdist_mpi

        xdist_mpi.record_units(config, items)


class UnmarkedMpiTest(AssertionError):
    """A test launched mpiexec without the ``mpi`` marker."""


@pytest.fixture(autouse=True)
def mpi_needs_its_marker(request: pytest.FixtureRequest,
                         monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test without ``@pytest.mark.mpi`` cannot start an mpiexec job in this process: it
    would escape ``make unit-fast``'s filter, the skip where mpiexec is missing, and the turns
    that MPI tests take under xdist (tests/support/xdist_mpi.py: a job beside the 48-rank one
    would oversubscribe the cores beyond it). A test with the marker runs in its turn."""
    marker = request.node.get_closest_marker(MPI_MARKER)
    if marker is not None:
        xdist_mpi = request.config.pluginmanager.get_plugin("spmdrules-xdist-mpi")
        if xdist_mpi is None:
            yield
            return
        with xdist_mpi.mpi_turn(request.config, alone=bool(marker.kwargs.get("alone"))):
            yield
        return
    import spmdrules.execution.launch as launch_module

    def refuse(*args: object, **kwargs: object) -> object:
        raise UnmarkedMpiTest(f"{request.node.nodeid} launches mpiexec: mark it "
                              "@pytest.mark.mpi (tests/conftest.py)")

    # every job (run_mpi's, tests/support/mpirun.py's) starts its mpiexec in launch's _run
    monkeypatch.setattr(launch_module, "_run", refuse)
    yield


# -- /dev/shm: no MPI job of the run leaves a shared-memory segment ------------------------------
_SHM_BEFORE = pytest.StashKey[set[str]]()
_SHM_LEFT = pytest.StashKey[str]()


def _whole_shm_checked(config: pytest.Config) -> bool:
    """The whole of /dev/shm is compared in the process that sees the run from start to end:
    the only one, or xdist's controller (a worker that ends early would count the files of a job
    another worker still runs)."""
    worker = hasattr(config, "workerinput")
    return not worker and os.environ.get("SPMDRULES_SHM_CHECK", "all") != "own"


def pytest_sessionstart(session: pytest.Session) -> None:
    if _whole_shm_checked(session.config) and not session.config.option.collectonly:
        session.config.stash[_SHM_BEFORE] = _shm_segments()


def pytest_sessionfinish(session: pytest.Session) -> None:
    before = session.config.stash.get(_SHM_BEFORE, None)
    if before is None:
        return
    new = _shm_segments() - before
    if new:
        session.config.stash[_SHM_LEFT] = (
            f"/dev/shm holds {len(new)} mpich_shm_* files after the session that it did not hold "
            f"before: {sorted(new)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    left = config.stash.get(_SHM_LEFT, None)
    if left is not None:
        terminalreporter.write_line(f"FAILED (shared memory): {left}", red=True, bold=True)


@pytest.fixture(scope="session", autouse=True)
def no_leftover_shared_memory() -> Iterator[None]:
    """After the session, none of the segments that this session's MPI jobs held is left
    (tests/support/mpirun.py records them).

    The whole of /dev/shm is also compared before and after the run (above), so on a machine
    where other MPI jobs run at the same time it can see their files: set SPMDRULES_SHM_CHECK=own
    there to check only this session's own segments (CI runs alone and checks both)."""
    yield
    import mpirun

    left = sorted(p for p in mpirun.SEEN_SEGMENTS if Path(p).exists())
    assert not left, f"shared-memory segments of this session's MPI jobs were left: {left}"
