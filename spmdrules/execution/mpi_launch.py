"""Launching a Program under ``mpiexec`` from an ordinary process: :func:`run_mpi` pickles the
program and the feeds, runs ``spmdrules.execution.mpi_worker`` on every rank (each runs
:class:`~spmdrules.execution.mpi.MPIExecutor`) and brings back the fetched values, bytes and
seconds. The whole process group is killed on a timeout."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from spmdrules.execution.executor import ExecutionError, Traffic, check_feeds
from spmdrules.execution.program import Program
from spmdrules.runtime.errors import MPIUnavailableError

Array = NDArray[Any]

#: MPICH settings for oversubscribed ranks (tests/runtime/mpirun.py uses the same)
MPI_ENV: Final[dict[str, str]] = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "10",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


# ---- launching from an ordinary process -------------------------------------------------------
@dataclass(slots=True)
class MPIRun:
    """What :func:`run_mpi` brings back: the fetched values, bytes and seconds."""

    values: dict[str, Array]
    traffic: Traffic
    #: slowest rank's seconds per phase (setup, run, kernel, collective, local, fetch)
    seconds: dict[str, float]
    #: wall time of the whole mpiexec job, start-up included
    wall: float
    nprocs: int


def mpiexec_path() -> Path | None:
    """The venv's ``mpiexec`` (next to this interpreter), else one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return here
    found = shutil.which("mpiexec")
    return Path(found) if found else None


def run_mpi(program: Program, feeds: Mapping[str, Any], *, nprocs: int | None = None,
            fetch: Sequence[str] | None = None, timeout: float = 120.0) -> MPIRun:
    """Run ``program`` under ``mpiexec -n nprocs`` and fetch ``fetch`` (default: every tensor).

    Raises :class:`MPIUnavailableError` without mpiexec or mpi4py, :class:`ExecutionError` if the
    job fails or exceeds ``timeout`` seconds (the whole process group is killed)."""
    exe = mpiexec_path()
    if exe is None:
        raise MPIUnavailableError("no mpiexec found; install spmdrules[mpi] (the mpich wheel)")
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        raise MPIUnavailableError("mpi4py is not installed; pip install 'spmdrules[mpi]'") from e
    check_feeds(program, feeds)
    n = nprocs if nprocs is not None else max(program.process_ids(), default=0) + 1
    names = list(program.tensors if fetch is None else fetch)
    with tempfile.TemporaryDirectory(prefix="spmdrules-job-") as tmp:
        job = Path(tmp)
        with open(job / "program.pkl", "wb") as f:
            pickle.dump(program, f)
        with open(job / "feeds.pkl", "wb") as f:
            pickle.dump({k: np.asarray(v) for k, v in feeds.items()}, f)
        (job / "fetch.json").write_text(json.dumps(names))
        env = {**os.environ, **MPI_ENV}
        repo = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [str(exe), "-n", str(n), sys.executable, "-m", "spmdrules.execution.mpi_worker", str(job)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise ExecutionError(f"mpiexec -n {n} timed out after {timeout:.0f} s; stderr:\n"
                                 f"{err[-2000:]}") from None
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not (job / "report.pkl").exists():
            raise ExecutionError(f"mpiexec -n {n} failed (exit {proc.returncode}):\n"
                                 f"{(err or out)[-3000:]}")
        with open(job / "report.pkl", "rb") as f:
            report = pickle.load(f)
        with open(job / "values.pkl", "rb") as f:
            values = pickle.load(f)
    return MPIRun(values, report.traffic, report.seconds, wall, n)


__all__ = ["MPI_ENV", "MPIRun", "mpiexec_path", "run_mpi"]
