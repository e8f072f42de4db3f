"""Launch a Python script under the venv's ``mpiexec`` with a hard timeout.

Jobs go through :func:`spmdrules.execution.launch.launch`: the script runs under
``spmdrules.execution.rank_script`` (a rank that raises aborts the job, naming itself; a rank
that finishes leaves a completion marker), every process of a job that times out is killed,
and shared-memory segments the job's processes held are removed at the end. Every segment a
job of this test session held is recorded in ``SEEN_SEGMENTS``; ``tests/conftest.py`` checks at
the end of the session that none of them is left. Settings make oversubscription (up to 12+
ranks on 2 cores) cheap: ranks yield the CPU while they wait.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from spmdrules.execution.launch import JobResult, launch, mpiexec_path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# the one run_mpi uses; tests/conftest.py skips the tests marked mpi where there is none
MPIEXEC = mpiexec_path() or BIN / "mpiexec"

# MPICH: ranks on one oversubscribed node must not spin; a failing rank must end the job.
MPI_ENV = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "10",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

#: every shared-memory file a job of this session's processes held
SEEN_SEGMENTS: set[str] = set()


@dataclass
class Result:
    #: mpiexec's exit status; 1 when it exited 0 although some rank never finished its work
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    job: JobResult


def mpirun(n: int, args: list[str], timeout: float, *, wrap: bool = True) -> Result:
    """Run ``mpiexec -n n python -m spmdrules.execution.rank_script args...`` from the repo
    root (``wrap=False``: ``python args...``, for scripts that handle failures themselves, as a
    user's own script would)."""
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": str(REPO)}
    runner = ["-m", "spmdrules.execution.rank_script"] if wrap else []
    argv = [sys.executable, *runner, *args]
    job = launch(n, argv, timeout=timeout, mpiexec=MPIEXEC, env=env, cwd=REPO)
    SEEN_SEGMENTS.update(job.seen_segments)
    rc, err = job.returncode, job.stderr
    if rc == 0 and not job.ok:
        rc, err = 1, f"{err}\n{job.describe()}\n"
    return Result(rc, job.stdout, err, job.timed_out, job)
