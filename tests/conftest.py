"""Fixtures shared by every test directory. (tests/ is no package: pytest imports test files
with importlib. Shared modules live in tests/support, which pytest puts on the path; helpers
that need pytest live here as fixtures.)"""

from __future__ import annotations

import contextlib
import io
import re
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
