"""Every code block of docs/runtime.md and every script in examples/ runs and succeeds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import mpirun
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


TIMEOUT = 90.0
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "docs/runtime.md").read_text(), re.S)
EXAMPLES = sorted((REPO / "examples").glob("seed*.py"))


def run_mpi(n: int, script: Path) -> None:
    res = mpirun.mpirun(n, [str(script)], timeout=TIMEOUT)
    assert not res.timed_out, f"{script.name} timed out under mpiexec -n {n}"
    assert res.returncode == 0, f"{script.name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"


def test_docs_have_blocks() -> None:
    assert len(BLOCKS) >= 7


RUN_LINE = re.compile(r"# run: mpiexec -n (\d+)")


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("i", [
    pytest.param(i, marks=[pytest.mark.mpi] if RUN_LINE.match(code) else [])
    for i, code in enumerate(BLOCKS)])
def test_docs_block(i: int, tmp_path: Path) -> None:
    code = BLOCKS[i]
    script = tmp_path / f"block{i}.py"
    script.write_text(code)
    m = RUN_LINE.match(code)
    if m:
        run_mpi(int(m.group(1)), script)
    else:
        subprocess.run([sys.executable, str(script)], check=True, timeout=TIMEOUT, cwd=REPO)


@pytest.mark.mpi
@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_seed_example(script: Path) -> None:
    run_mpi(12, script)
