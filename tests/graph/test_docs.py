"""Every ```python block of docs/graph.md runs, top to bottom in one namespace, and the errors it
shows are the ones printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_doc_code_blocks_run_and_print_what_is_shown(doc_page: Any, repo_root: Path) -> None:
    doc_page(repo_root / "docs" / "graph.md").check(min_blocks=8, min_shown=1)
