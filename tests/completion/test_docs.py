"""Every ```python block of docs/completion.md runs, and the printed outputs shown match."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "completion.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHOWN = re.compile(r"^```text\n(.*?)^```", re.S | re.M)


def test_doc_code_blocks_run_and_print_what_is_shown() -> None:
    text = DOC.read_text()
    blocks = BLOCK.findall(text)
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"__name__": "docs_completion"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"{DOC.name}[block {i}]", "exec"), namespace)
    printed = out.getvalue()
    for shown in SHOWN.findall(text):
        for line in shown.strip().splitlines():
            assert line.rstrip() in printed, line
