"""Fixtures shared by every test directory. (tests/ is no package: pytest imports test files
with importlib. Shared modules live in tests/support, which pytest puts on the path; helpers
that need pytest live here as fixtures.)"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture(scope="session", autouse=True)
def no_leftover_shared_memory() -> Iterator[None]:
    """After the session, /dev/shm holds no more mpich_shm_* files than before it, and none of
    the segments that this session's MPI jobs held (tests/support/mpirun.py records them).

    The first check compares the whole of /dev/shm, so on a machine where other MPI jobs run at
    the same time it can see their files: set SPMDRULES_SHM_CHECK=own there to check only this
    session's own segments (CI runs alone and checks both)."""
    before = _shm_segments()
    yield
    import mpirun

    left = sorted(p for p in mpirun.SEEN_SEGMENTS if Path(p).exists())
    assert not left, f"shared-memory segments of this session's MPI jobs were left: {left}"
    if os.environ.get("SPMDRULES_SHM_CHECK", "all") != "own":
        after = _shm_segments()
        assert len(after) <= len(before), (
            f"/dev/shm holds {len(after)} mpich_shm_* files after the session, {len(before)} "
            f"before; new: {sorted(after - before)}")
