"""Every ```python block of docs/execution.md runs (its MPI blocks under a real mpiexec), and
everything the page says a block prints is printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_doc_code_blocks_run_and_print_what_is_shown(doc_page: Any, repo_root: Path) -> None:
    doc_page(repo_root / "docs" / "execution.md").check(min_blocks=5, min_shown=6)
