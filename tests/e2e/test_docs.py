"""Every ```python block of docs/execution.md runs (its MPI block under a real mpiexec), and
everything the page says a block prints is printed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "execution.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHOWN = re.compile(r"^```text\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"^prints `(.*?)`", re.M)


@pytest.mark.timeout(120)
def test_doc_code_blocks_run_and_print_what_is_shown() -> None:
    text = DOC.read_text()
    blocks = BLOCK.findall(text)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "docs_execution"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"{DOC.name}[block {i}]", "exec"), namespace)
    printed = out.getvalue()
    shown = [ln for s in SHOWN.findall(text) for ln in s.strip().splitlines()]
    shown += INLINE.findall(text)
    assert len(shown) >= 4
    for line in shown:
        assert line.rstrip() in printed, line
