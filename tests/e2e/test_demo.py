"""``make demo`` keeps working: the simulated fast path in process, the MPI path as a command."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spmdrules import demo

REPO = Path(__file__).resolve().parents[2]


def test_demo_simulated_path_matches_serial() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = demo.main(["--sim"])
    text = out.getvalue()
    assert code == 0, text
    assert text.count("MATCHES serial numpy") == 4
    assert "== LLaMA decoder" in text and text.count("gradients MATCH") == 4
    assert "== ResNet block" in text and "halo x -> conv1:" in text
    assert "ran on: simulated mesh" in text and "-> equal" in text
    assert "annotation table" in text and "all-reduce(mp)" in text
    assert "demo passed" in text


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_demo_command_runs_on_mpi() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # bounded, not timed: tests never assert on speed (the demo prints its own wall times)
    proc = subprocess.run([sys.executable, "-m", "spmdrules.demo"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("ran on: MPI, 4 ranks") == 4
    assert proc.stdout.count("MATCHES serial numpy") == 4
    assert "grad[halo x -> conv1]:" in proc.stdout
    assert "wall time per phase" in proc.stdout and "demo passed" in proc.stdout
