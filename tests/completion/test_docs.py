"""Every ```python block of docs/completion.md runs, and the printed outputs shown match."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_doc_code_blocks_run_and_print_what_is_shown(doc_page: Any, repo_root: Path) -> None:
    doc_page(repo_root / "docs" / "completion.md").check(min_blocks=5, min_shown=8)
