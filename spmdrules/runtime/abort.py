"""End the whole MPI job when one worker fails, naming the worker and its error.

An exception on one worker leaves the others waiting in their next collective for a partner
that will never come. MPI cannot hand the exception to them, but ``MPI_Abort`` ends every
process of the job at once, and ``mpiexec`` then exits with a non-zero status. These helpers
print the failing worker's rank and traceback first, so the job's output says who failed and
why:

- :func:`abort_on_error` is a context manager for the body of a script (or any block that
  calls collectives);
- :func:`install_excepthook` does the same for any exception that reaches the top of the
  script, in the main thread or another one;
- :func:`fail` reports and aborts from wherever a failure is caught (the MPI executor uses it);
  :func:`abort_job` aborts with a report of the caller's own (the watchdog's, which names the
  rank that holds the job up: :mod:`spmdrules.runtime.progress`).

A worker that exits without an exception but too early (``os._exit``) is ended by ``mpiexec``
itself (MPICH's hydra kills the job when a process leaves without ``MPI_Finalize``); a job
launched by spmdrules also checks that every rank reached its completion marker
(:mod:`spmdrules.execution.launch`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from spmdrules.runtime._mpi import mpi
from spmdrules.runtime.progress import JOB_DIR_ENV

#: exit status of a job that a failing worker aborted
ABORT_STATUS = 13


def failure_report(exc: BaseException, comm: Any = None, where: str = "") -> str:
    """The text printed before an abort: rank, where, error and traceback."""
    comm = comm if comm is not None else mpi().COMM_WORLD
    place = f" in {where}" if where else ""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return (f"spmdrules: rank {comm.Get_rank()} of {comm.Get_size()} failed{place}: "
            f"{type(exc).__name__}: {exc}\n{tb}"
            f"spmdrules: rank {comm.Get_rank()} aborts the job (every rank ends now)\n")


def fail(exc: BaseException, comm: Any = None, where: str = "") -> NoReturn:
    """Print who failed and why, then ``MPI_Abort`` the whole job."""
    comm = comm if comm is not None else mpi().COMM_WORLD
    report = ""
    with contextlib.suppress(Exception):
        report = failure_report(exc, comm, where)
    abort_job(report, comm)


def abort_job(report: str, comm: Any = None) -> NoReturn:
    """Print ``report`` (also into the job's folder, in a job that spmdrules launches: the
    copy on stderr goes through MPICH's output forwarding, which the abort may kill before it
    reaches ``mpiexec``), then ``MPI_Abort`` the whole job."""
    comm = comm if comm is not None else mpi().COMM_WORLD
    with contextlib.suppress(Exception):
        job = os.environ.get(JOB_DIR_ENV)
        if job and report:
            Path(job, f"failed.{comm.Get_rank()}").write_text(report)
        sys.stderr.write(report)
        sys.stderr.flush()
    comm.Abort(ABORT_STATUS)
    raise SystemExit(ABORT_STATUS)  # pragma: no cover - Abort does not return


@contextlib.contextmanager
def abort_on_error(comm: Any = None, where: str = "") -> Iterator[None]:
    """Abort the job if the block raises (``KeyboardInterrupt`` and ``SystemExit`` with a
    non-zero status too: they leave the other workers waiting as any exception does)."""
    try:
        yield
    except SystemExit as e:
        if e.code not in (0, None):
            fail(e, comm, where)
        raise
    except BaseException as e:
        fail(e, comm, where)


def install_excepthook(comm: Any = None) -> None:
    """Make an uncaught exception (main thread or any other) abort the job."""

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        fail(exc.with_traceback(tb), comm, "an uncaught exception")

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            fail(args.exc_value, comm, f"thread {args.thread.name if args.thread else '?'}")

    sys.excepthook = hook
    threading.excepthook = thread_hook


__all__ = ["ABORT_STATUS", "JOB_DIR_ENV", "abort_job", "abort_on_error", "fail", "failure_report",
           "install_excepthook"]
