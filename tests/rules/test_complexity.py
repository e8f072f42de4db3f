"""The rule families stay readable: no function in rules/ above cyclomatic complexity 20, as
radon counts it, closures included (issue 25: concat_split's ``_align`` was 26, now
``spmdrules.engine.align.align``; rotary's ``check_rope`` was 24)."""

from __future__ import annotations

from pathlib import Path

import spmdrules.rules
from radon.complexity import add_inner_blocks, cc_visit

import spmdrules.engine.align

MAX_COMPLEXITY = 20


def test_no_rule_function_is_above_complexity_20() -> None:
    files = sorted(Path(spmdrules.rules.__path__[0]).glob("*.py"))
    files.append(Path(spmdrules.engine.align.__file__))
    assert len(files) > 30  # the families themselves, not an empty folder
    over = [f"{path.name}:{block.lineno} {block.fullname} ({block.complexity})"
            for path in files
            for block in add_inner_blocks(cc_visit(path.read_text()))
            if block.complexity > MAX_COMPLEXITY]
    assert over == [], "split these by concept: " + ", ".join(over)
