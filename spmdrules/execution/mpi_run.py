"""Run a lowered program under ``mpiexec`` from an ordinary Python process: :func:`run_mpi`.

It pickles the program and the feeds into a job folder, runs
:mod:`spmdrules.execution.mpi_worker` on every rank through the launcher
(:func:`spmdrules.execution.launch.launch`: hard timeout, every rank accounted for, no shared
memory left behind, nothing left running if the caller dies), and reads back the gathered
results and what each rank measured.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from spmdrules.execution.executor import ExecutionError, Traffic, check_feeds
from spmdrules.execution.launch import launch, mpiexec_path
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


@dataclass(slots=True)
class RankReport:
    """What one rank measured: bytes it sent and seconds per phase."""

    traffic: Traffic = field(default_factory=Traffic)
    seconds: dict[str, float] = field(default_factory=dict)


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


def rank_timeout(timeout: float) -> float:
    """The ranks' own watchdog of a job of ``timeout`` seconds: it ends a stuck job, naming the
    rank that holds it up and where, a little before the launcher would kill it."""
    return max(1.0, 0.9 * timeout - 5.0)


def run_mpi(program: Program, feeds: Mapping[str, Any], *, nprocs: int | None = None,
            fetch: Sequence[str] | None = None, timeout: float = 120.0) -> MPIRun:
    """Run ``program`` under ``mpiexec -n nprocs`` and fetch ``fetch`` (default: every tensor).

    Raises :class:`MPIUnavailableError` without mpiexec or mpi4py, :class:`ExecutionError` if the
    job fails, if a rank ends before its work is done, or if the job exceeds ``timeout`` seconds
    (then every process of it is killed); the error names the rank that failed, died or holds
    the others up, and where. The job runs through :func:`~spmdrules.execution.launch.launch`:
    shared-memory segments its ranks leave behind are removed, also when the caller is killed."""
    exe = mpiexec_path()
    if exe is None:
        raise MPIUnavailableError("no mpiexec found; install the extra in a clone: "
                                  "pip install -e '.[mpi]' (the mpich wheel)")
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        raise MPIUnavailableError("mpi4py is not installed; in a clone of spmdrules: "
                                  "pip install -e '.[mpi]'") from e
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
        # the folder that holds the spmdrules package, for ranks of a caller that found it there
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        argv = [sys.executable, "-m", "spmdrules.execution.mpi_worker", str(job),
                str(rank_timeout(timeout))]
        res = launch(n, argv, timeout=timeout, mpiexec=exe, env=env, scratch=[job])
        wall = res.wall
        if not res.ok or not (job / "report.pkl").exists():
            raise ExecutionError(f"{res.describe()}:\n{(res.stderr or res.stdout)[-3000:]}")
        with open(job / "report.pkl", "rb") as f:
            report: RankReport = pickle.load(f)
        with open(job / "values.pkl", "rb") as f:
            values = pickle.load(f)
    return MPIRun(values, report.traffic, report.seconds, wall, n)


__all__ = ["MPI_ENV", "MPIRun", "RankReport", "rank_timeout", "run_mpi"]
