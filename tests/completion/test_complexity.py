"""Completion's core stays readable: no function in spmdrules/completion above cyclomatic
complexity 20, as radon counts it (``radon cc -s -n D spmdrules/completion`` lists none), closures
and methods included (issue 25: ``Sweeps.choose`` was 37)."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import add_inner_blocks, cc_visit

import spmdrules.completion

MAX_COMPLEXITY = 20


def test_no_function_in_completion_is_above_complexity_20() -> None:
    package = Path(spmdrules.completion.__file__).parent
    files = sorted(package.glob("*.py"))
    assert len(files) > 10  # the package itself, not an empty folder
    over = [f"{path.name}:{block.lineno} {block.fullname} ({block.complexity})"
            for path in files
            for block in add_inner_blocks(cc_visit(path.read_text()))
            if block.complexity > MAX_COMPLEXITY]
    assert over == [], "split these by concept: " + ", ".join(over)
