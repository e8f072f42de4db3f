"""Every example in README.md and the docs runs, and every module's doctests pass."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spmdrules

ROOT = Path(__file__).resolve().parents[1]
# Docs whose examples need MPI or another layer's fixtures are executed by that layer's tests;
# api.md's blocks are the contract's outlines, whose names tests/test_api_doc.py checks.
OWN_TESTS = {"runtime.md", "graph.md", "completion.md", "execution.md", "verify.md", "api.md",
             "plugins.md"}
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_TESTS),
]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_markdown_examples_run(path: Path, tmp_path: Path, doc_page: Any) -> None:
    """The ```python blocks run top to bottom in one fresh interpreter (an example may register
    a rule: it must not leak into other tests), and the ```pycon blocks are doctests."""
    blocks = doc_page(path).blocks
    script = tmp_path / f"doc_{path.stem}.py"
    script.write_text("\n".join(f"# --- block {i}\n{code}" for i, code in enumerate(blocks)))
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, f"{path.name} examples failed:\n{run.stderr[-3000:]}"
    doc = subprocess.run(
        [sys.executable, "-m", "doctest", "-o", "ELLIPSIS", "-o", "NORMALIZE_WHITESPACE",
         str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert doc.returncode == 0, f"{path.name} doctest examples failed:\n{doc.stdout[-3000:]}"


def _modules() -> list[str]:
    names = ["spmdrules"]
    for m in pkgutil.walk_packages(spmdrules.__path__, "spmdrules."):
        if ".runtime" not in m.name and not m.name.endswith("__main__"):
            names.append(m.name)
    return names


@pytest.mark.parametrize("name", _modules())
def test_doctests(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
