"""Every example in README.md and the docs runs, and every module's doctests pass."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import spmdrules

ROOT = Path(__file__).resolve().parents[1]
# Docs whose examples need MPI or another layer's fixtures are executed by that layer's tests.
OWN_TESTS = {"runtime.md", "graph.md"}
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_TESTS),
]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_markdown_examples_run(path: Path) -> None:
    blocks = BLOCK.findall(path.read_text())
    namespace: dict[str, object] = {"__name__": f"doc_{path.stem}"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{path.name}[block {i}]", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{path.name} block {i} failed: {type(e).__name__}: {e}") from e
    # ```pycon blocks are doctests: their printed results are checked.
    result = doctest.testfile(
        str(path),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.failed == 0, f"{path.name}: {result.failed} doctest example(s) failed"


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
