"""Launch a Python script under the venv's ``mpiexec`` with a hard timeout.

The job runs in its own process group; on timeout the whole group is killed and the caller
gets a failure instead of a hang.  Settings make oversubscription (up to 12+ ranks on 2
cores) cheap: ranks yield the CPU while they wait.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"

# MPICH: ranks on one oversubscribed node must not spin; a failing rank must end the job.
MPI_ENV = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "10",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def mpirun(n: int, args: list[str], timeout: float) -> Result:
    """Run ``mpiexec -n n python args...`` from the repo root."""
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": str(REPO)}
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, *args]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return Result(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Result(-9, out, err, True)
