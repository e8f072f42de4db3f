"""How the MPI executor ends when its ranks disagree or one fails (issue 15): the program view
every rank must agree on, the shared verdict on the feeds, and the watchdog of its setup and
its runs, which names the rank that holds the others up (issue 23).

See "Faults end cleanly" in docs/execution.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from spmdrules.core.errors import SpmdError
from spmdrules.execution.executor import check_feeds
from spmdrules.execution.program import KernelCall, LocalStep, Program
from spmdrules.runtime.abort import abort_job
from spmdrules.runtime.errors import RankFailedError
from spmdrules.runtime.progress import JOB_DIR_ENV, at, current, diagnose, read_places, states_here


def program_view(program: Program) -> str:
    """What every rank of an MPI executor must agree on: the program's buffers (global shape,
    dtype, mesh, placement) and instructions, as a readable summary with a digest."""
    parts = [program.name, repr(sorted(program.process_ids())), repr(program.feeds)]
    for name, lay in program.buffers.items():
        parts.append(f"{name}:{lay.shape}:{lay.dtype}:{lay.mesh.shape}:"
                     f"{tuple(lay.mesh.process_ids)}:{lay.attr.multi_dims_mapping}:"
                     f"{lay.attr.partial_items}")
    parts.extend(describe_instruction(ins) for ins in program.instructions)
    digest = hashlib.blake2b("\n".join(parts).encode(), digest_size=8).hexdigest()
    return (f"program {program.name!r} with {len(program.buffers)} buffers and "
            f"{len(program.instructions)} instructions (structure digest {digest})")


def describe_instruction(ins: Any) -> str:
    if isinstance(ins, KernelCall):
        return f"kernel {ins.op!r} ({ins.op_type}) on mesh {ins.mesh.shape}"
    if isinstance(ins, LocalStep):
        return f"local step {ins.op!r}"
    return f"{ins.kind} {ins.src} -> {ins.dst} (mesh dim {ins.mesh_dim})"


#: how long a watchdog that finds the stall already being reported waits for that rank's abort
REPORT_WAIT_SECONDS = 5.0


class Watchdog:
    """Aborts the job if a block of work has not finished within ``timeout`` seconds, naming
    the rank that holds the others up and where each rank is (a rank waiting for a partner that
    never comes ends the job instead of hanging). See :mod:`spmdrules.runtime.progress`."""

    def __init__(self, comm: Any, timeout: float, what: str) -> None:
        from spmdrules.runtime._mpi import mpi

        world = mpi().COMM_WORLD
        self._world = world
        # the ranks of comm, as the job numbers them (the places are recorded by job rank)
        self._members: list[int] = [int(r) for r in comm.Get_group().Translate_ranks(
            list(range(comm.Get_size())), world.Get_group())]
        self._timer = threading.Timer(timeout, self._fire, (comm, timeout, what))
        self._timer.daemon = True
        self._timer.start()

    def report(self, timeout: float, what: str) -> str:
        """The stall report (empty when another rank's watchdog reports the same stall)."""
        me, n = self._world.Get_rank(), self._world.Get_size()
        found = (f"found by rank {me}'s watchdog: {what} did not finish within {timeout:g} s; "
                 f"rank {me} aborts the job (every rank ends now)")
        job = os.environ.get(JOB_DIR_ENV)
        if not job or not os.path.isdir(job):
            # no job folder: the other ranks' places are not known here
            lines = [f"rank {me} of {n} waits at {current()} (the other ranks' places are "
                     "known only in a job that spmdrules launches)", found]
        else:
            try:  # one report per job: the first watchdog to fire writes it
                os.close(os.open(Path(job, "stall"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return ""
            places = read_places(job)
            working = [r for r in self._members if not Path(job, f"done.{r}").exists()]
            lines = [*diagnose(working, n, places, states_here(places)).lines(), found]
        return "".join(f"spmdrules: stall: {line}\n" for line in lines)

    def _fire(self, comm: Any, timeout: float, what: str) -> None:
        report: str | None = None
        with contextlib.suppress(Exception):
            report = self.report(timeout, what)
        if report == "":
            # another rank's watchdog reports this stall, and its abort ends this rank too; an
            # abort from here could end the job before that report is out
            time.sleep(REPORT_WAIT_SECONDS)
        abort_job(report or "", comm)

    def cancel(self) -> None:
        self._timer.cancel()


@contextlib.contextmanager
def watched(comm: Any, timeout: float | None, what: str) -> Iterator[None]:
    """Run the block under a :class:`Watchdog` of ``timeout`` seconds (None: no watchdog)."""
    dog = Watchdog(comm, timeout, what) if timeout is not None else None
    try:
        yield
    finally:
        if dog is not None:
            dog.cancel()


def agree_on_feeds(comm: Any, program: Program, feeds: Mapping[str, Any]) -> None:
    """Check the feeds on every rank and share the verdicts (one small allgather): a rank
    whose feeds are wrong must not leave the others waiting in the first collective."""
    error: SpmdError | None = None
    at("feeds: checking the feeds")
    try:
        check_feeds(program, feeds)
    except SpmdError as e:
        error = e
    at("feeds: sharing the verdicts on the feeds")
    verdicts: list[str | None] = comm.allgather(
        None if error is None else f"{type(error).__name__}: {error}")
    failed = {r: v for r, v in enumerate(verdicts) if v is not None}
    if error is not None:
        raise error
    if failed:
        detail = "; ".join(f"rank {r}: {v}" for r, v in failed.items())
        raise RankFailedError(
            f"MPIExecutor.run of {program.name!r}: ranks {sorted(failed)} refused their "
            f"feeds ({detail}); every rank stops. Pass the same feeds on every rank")


__all__ = ["Watchdog", "agree_on_feeds", "describe_instruction", "program_view", "watched"]
