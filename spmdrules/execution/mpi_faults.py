"""How the MPI executor ends when its ranks disagree or one fails (issue 15): the program view
every rank must agree on, the shared verdict on the feeds, and the watchdog of a run.

See "Faults end cleanly" in docs/execution.md.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from typing import Any

from spmdrules.core.errors import SpmdError
from spmdrules.execution.executor import check_feeds
from spmdrules.execution.program import KernelCall, LocalStep, Program
from spmdrules.runtime.abort import fail
from spmdrules.runtime.errors import RankFailedError


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


class Watchdog:
    """Aborts the job if a run has not finished within ``timeout`` seconds (a rank waiting
    for a partner that never comes ends the job instead of hanging)."""

    def __init__(self, comm: Any, timeout: float, where: list[str]) -> None:
        self._timer = threading.Timer(timeout, self._fire, (comm, timeout, where))
        self._timer.daemon = True
        self._timer.start()

    @staticmethod
    def _fire(comm: Any, timeout: float, where: list[str]) -> None:
        fail(TimeoutError(f"MPIExecutor.run did not finish within {timeout:g} s; this rank "
                          f"waits at {where[0]}"), comm, "MPIExecutor.run (timeout)")

    def cancel(self) -> None:
        self._timer.cancel()


def agree_on_feeds(comm: Any, program: Program, feeds: Mapping[str, Any]) -> None:
    """Check the feeds on every rank and share the verdicts (one small allgather): a rank
    whose feeds are wrong must not leave the others waiting in the first collective."""
    error: SpmdError | None = None
    try:
        check_feeds(program, feeds)
    except SpmdError as e:
        error = e
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


__all__ = ["Watchdog", "agree_on_feeds", "describe_instruction", "program_view"]
