"""Every ```python block of docs/graph.md runs, top to bottom in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "graph.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_doc_has_code() -> None:
    assert len(BLOCK.findall(DOC.read_text())) >= 8


def test_doc_code_blocks_run() -> None:
    namespace: dict[str, object] = {"__name__": "docs_graph"}
    for i, block in enumerate(BLOCK.findall(DOC.read_text())):
        code = compile(block, f"{DOC.name}[block {i}]", "exec")
        exec(code, namespace)


def test_doc_printed_errors_match() -> None:
    import contextlib
    import io

    text = DOC.read_text()
    blocks = BLOCK.findall(text)
    namespace: dict[str, object] = {"__name__": "docs_graph"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, DOC.name, "exec"), namespace)
    printed = out.getvalue()
    shown = re.search(r"```text\n(.*?)```", text, re.S)
    assert shown is not None
    for line in shown.group(1).strip().splitlines():
        assert line in printed
