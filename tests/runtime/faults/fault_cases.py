"""Fault-injection scripts: ``mpiexec -n N python fault_cases.py CASE``.

Each case breaks one rank on purpose: a partition or argument that differs from the other
ranks', an exception before or inside a collective, a rank that dies or exits with status 0
half-way, bad feeds or another program for the MPI executor, a rank that exits, is killed, is
stopped or hangs in the executor's setup, its feeds' agreement or its instruction loop. A rank
that catches a typed error prints ``TYPED <rank> <error class> <message>``; a rank that gets to
the end prints ``DONE <rank>``. Scripts run the way a user's own mpiexec script would: the body runs inside
:func:`spmdrules.runtime.abort_on_error`, the documented pattern, so an exception on one rank
aborts the job naming that rank.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from spmdrules import SpmdError
from spmdrules.execution.launch import mark_done
from spmdrules.runtime import (
    AllSumReduce,
    Broadcast,
    DistributedLinear,
    MPIPartition,
    Repartition,
    SumReduce,
    abort_on_error,
    zero_volume_tensor,
)
from spmdrules.runtime.box_exchange import BoxExchange
from spmdrules.runtime.reduce_broadcast import ReduceBroadcast

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
VICTIM = 2  # the rank that fails in the one-rank cases


def say(line: str) -> None:
    """One line on stdout in one write (atomic on a pipe), so ranks' lines never interleave."""
    sys.stdout.flush()
    os.write(1, (line.replace("\n", " ")[:3000] + "\n").encode())


def typed(e: SpmdError) -> None:
    say(f"TYPED {rank} {type(e).__name__} {e}")


# -- structure agreement -----------------------------------------------------------------------
def shapes() -> None:
    """Repartition(P_x, P_y) with P_y [2, 2] on rank 0 and [1, 4] on the others (the issue's)."""
    P = MPIPartition(comm)
    P_x = P.create_cartesian_topology_partition([n, 1])
    P_y = P.create_cartesian_topology_partition([2, n // 2] if rank == 0 else [1, n])
    Repartition(P_x, P_y)


def shapes_sum_reduce() -> None:
    """SumReduce(P_x, P_y): rank VICTIM reduces 2 x n/2 onto 1 x n/2, the others onto 2 x 1."""
    P = MPIPartition(comm)
    P_x = P.create_cartesian_topology_partition([2, n // 2])
    P_y = P.create_partition_inclusive(range(n // 2) if rank == VICTIM else range(2))
    P_y = P_y.create_cartesian_topology_partition([1, n // 2] if rank == VICTIM else [2, 1])
    SumReduce(P_x, P_y)


def rank_sets() -> None:
    """Broadcast onto the workers [n/2, n) on rank VICTIM but onto [0, n/2) elsewhere: the
    partition itself is refused (its communicator is collective over its members)."""
    P = MPIPartition(comm)
    half = range(n // 2, n) if rank == VICTIM else range(n // 2)
    P_y = P.create_partition_inclusive(half).create_cartesian_topology_partition([n // 2])
    P_x = P.create_partition_inclusive([0]).create_cartesian_topology_partition([1])
    Broadcast(P_x, P_y)


def rank_sets_layer() -> None:
    """Two partitions are built by every rank (so both are valid); rank VICTIM then passes the
    one of the upper half of the ranks to Broadcast, the others the lower half's."""
    P = MPIPartition(comm)
    low = P.create_partition_inclusive(range(n // 2)).create_cartesian_topology_partition([n // 2])
    high = P.create_partition_inclusive(range(n // 2, n)).create_cartesian_topology_partition(
        [n // 2])
    P_x = P.create_partition_inclusive([0]).create_cartesian_topology_partition([1])
    Broadcast(P_x, high if rank == VICTIM else low)


def missing_rank() -> None:
    """Rank n-1 leaves itself out of P_x that the others build over all ranks."""
    P = MPIPartition(comm)
    P.create_partition_inclusive(range(n - 1) if rank == n - 1 else range(n))


def global_shapes() -> None:
    """DistributedLinear with in_features 6 on rank VICTIM and 8 elsewhere."""
    P = MPIPartition(comm)
    P_x = P.create_partition_inclusive([0, 1]).create_cartesian_topology_partition([1, 2])
    P_y = P.create_partition_inclusive([2, 3]).create_cartesian_topology_partition([1, 2])
    P_W = P.create_partition_inclusive(range(4)).create_cartesian_topology_partition([2, 2])
    DistributedLinear(P_x, P_y, P_W, in_features=6 if rank == VICTIM else 8, out_features=4)


def axes() -> None:
    """AllSumReduce over axis 0 on rank VICTIM, axis 1 elsewhere."""
    P = MPIPartition(comm)
    P_x = P.create_cartesian_topology_partition([2, n // 2])
    AllSumReduce(P_x, axes_reduce=[0] if rank == VICTIM else [1])


# -- one rank fails ------------------------------------------------------------------------------
def _layers() -> tuple[MPIPartition, Any, Any, Any]:
    P = MPIPartition(comm)
    P_x = P.create_cartesian_topology_partition([2, n // 2])
    P_y = P.create_partition_inclusive(range(n // 2)).create_cartesian_topology_partition(
        [1, n // 2])
    P_z = P.create_cartesian_topology_partition([n // 2, 2])
    return P_x, SumReduce(P_x, P_y), Broadcast(P_y, P_x), Repartition(P_x, P_z)


def _block(P_x: MPIPartition) -> np.ndarray[Any, Any]:
    return np.full((64, 64), float(rank)) if P_x.active else zero_volume_tensor()


def _inject(cls: type, name: str, action: Callable[[], None]) -> None:
    """Make ``cls.name`` run ``action`` on the victim rank, inside the collective."""
    original = getattr(cls, name)

    def broken(*args: Any, **kw: Any) -> Any:
        if rank == VICTIM:
            action()
        return original(*args, **kw)

    setattr(cls, name, broken)


def _boom() -> None:
    raise RuntimeError(f"injected failure on rank {rank}")


def _die() -> None:
    os._exit(1)


def _run_layers(which: str) -> None:
    P_x, reduce, bcast, repart = _layers()
    x = _block(P_x)
    for _ in range(3):  # steady calls first: the failure hits a layer in use
        y = {"sum_reduce": reduce, "broadcast": lambda v: bcast(reduce(v)),
             "repartition": repart}[which](x)
    del y


def raise_before() -> None:
    """Rank VICTIM raises between collectives; the others wait in SumReduce."""
    P_x, reduce, _, _ = _layers()
    x = _block(P_x)
    reduce(x)
    if rank == VICTIM:
        raise ValueError(f"injected error on rank {rank} before the collective")
    for _ in range(3):
        reduce(x)


def raise_silent() -> None:
    """As raise_before, but rank VICTIM's stderr goes nowhere: its report must still reach the
    launcher (MPICH's output forwarding may be killed by the abort before it delivers)."""
    P_x, reduce, _, _ = _layers()
    x = _block(P_x)
    reduce(x)
    if rank == VICTIM:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - this rank ends with the abort
        raise ValueError(f"injected error on rank {rank}, with no stderr")
    for _ in range(3):
        reduce(x)


def raise_inside() -> None:
    """Rank VICTIM raises inside Repartition's data movement."""
    P_x, _, _, repart = _layers()
    x = _block(P_x)
    repart(x)
    _inject(BoxExchange, "gather", _boom)
    repart(x)


def exit_sum_reduce() -> None:
    """Rank VICTIM dies (os._exit(1)) inside a SumReduce."""
    _inject(ReduceBroadcast, "_reduce_group", _die)
    _run_layers("sum_reduce")


def exit_broadcast() -> None:
    """Rank VICTIM dies inside a Broadcast."""
    _inject(ReduceBroadcast, "_broadcast_group", _die)
    _run_layers("broadcast")


def exit_repartition() -> None:
    """Rank VICTIM dies inside a Repartition."""
    _inject(BoxExchange, "gather", _die)
    _run_layers("repartition")


def exit_zero() -> None:
    """Rank VICTIM exits with status 0 in the middle of a loop of AllSumReduce."""
    P = MPIPartition(comm)
    layer = AllSumReduce(P.create_cartesian_topology_partition([n]))
    x = np.ones(1000)
    for i in range(20):
        if i == 5 and rank == VICTIM:
            os._exit(0)
        x = layer(x) / n


# -- the MPI executor ----------------------------------------------------------------------------
def _program(batch: int = 4) -> Any:
    from e2e_models import mlp64
    from pipeline_cases import MEGATRON2, MESH2

    from spmdrules.completion import complete
    from spmdrules.execution.lowering import lower

    return lower(complete(mlp64(MESH2, MEGATRON2, batch=batch)))


def _feeds(prog: Any) -> dict[str, Any]:
    from spmdrules.execution.executor import random_feeds

    return random_feeds(prog, seed=3)


def executor_program() -> None:
    """Rank VICTIM lowers the model with batch 6, the others with batch 4."""
    from spmdrules.execution.mpi import MPIExecutor

    MPIExecutor(_program(6 if rank == VICTIM else 4), comm)


def executor_feeds() -> None:
    """Rank VICTIM feeds x with a wrong shape."""
    from spmdrules.execution.mpi import MPIExecutor

    prog = _program()
    feeds = _feeds(prog)
    if rank == VICTIM:
        feeds["x"] = feeds["x"][:, :-1]
    MPIExecutor(prog, comm).run(feeds)


def executor_kernel() -> None:
    """Kernels refuse their input on ranks 2 and 3 (as out-of-vocabulary ids do)."""
    import spmdrules.execution.mpi as mpi_mod
    from spmdrules.execution.local import KernelInputError

    prog = _program()
    original = mpi_mod.call_kernel

    def refusing(call: Any, *args: Any) -> Any:
        if rank in (2, 3) and call.op_type == "gelu":
            raise KernelInputError(f"kernel {call.op!r}: injected bad input on rank {rank}")
        return original(call, *args)

    mpi_mod.call_kernel = refusing  # type: ignore[assignment]
    mpi_mod.MPIExecutor(prog, comm).run(_feeds(prog))


def child_processes() -> None:
    """No fault: every rank starts short-lived processes (as ctypes.util.find_library starts
    ldconfig), which inherit the rank's environment; their ends are no rank's death."""
    import subprocess

    P_x, reduce, _, _ = _layers()
    x = _block(P_x)
    for _ in range(3):
        subprocess.run(["sleep", "0.3"], check=True)  # several of the launcher's scans long
        reduce(x)


def executor_dies() -> None:
    """Rank VICTIM dies in the middle of the executor's run (after its first collective)."""
    import spmdrules.execution.mpi as mpi_mod

    prog = _program()
    ex = mpi_mod.MPIExecutor(prog, comm)
    original = ex._collective

    def dying(*args: Any) -> Any:
        if rank == VICTIM:
            os._exit(1)
        return original(*args)

    ex._collective = dying  # type: ignore[method-assign]
    ex.run(_feeds(prog))


# -- a rank that stops: it exits, is killed, is stopped by a signal, or waits forever -------------
#: the environment variable that sets the watchdog of the cases below (test_faults.py passes it)
WATCHDOG_ENV = "FAULT_WATCHDOG_SECONDS"
#: the watchdog of the cases below, which each stop case waits out: a healthy setup or run of the
#: small program takes well under a second, also on an oversubscribed machine (a machine loaded
#: far beyond its cores may need more: set FAULT_WATCHDOG_SECONDS)
WATCHDOG = float(os.environ.get(WATCHDOG_ENV, "6"))


def _stop(how: str) -> None:
    """Rank VICTIM stops: ``exit`` (os._exit), ``kill`` (SIGKILL), ``stop`` (SIGSTOP: the process
    is there but never runs again) or ``hang`` (waits forever, its threads alive)."""
    if rank != VICTIM:
        return
    if how == "exit":
        os._exit(1)
    if how in ("kill", "stop"):
        os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    threading.Event().wait()


def executor_stops() -> None:
    """``executor_stops PLACE HOW``: rank VICTIM stops (HOW, see ``_stop``) in the local work of
    a place of the MPI executor, while the others go on to wait in the next collective: its
    setup (loading the kernels, then the setup's communicators), its feeds' agreement (checking
    the feeds, then sharing the verdicts) or its instruction loop (its first kernel call, then
    the next collective). The setup is watched only when the victim stops there: run(timeout=)
    alone covers the feeds' agreement and the instructions."""
    import spmdrules.execution.mpi as mpi_mod
    import spmdrules.execution.mpi_faults as faults_mod

    place, how = sys.argv[2], sys.argv[3]
    module, name = {"setup": (mpi_mod, "list_kernels"), "feeds": (faults_mod, "check_feeds"),
                    "instruction": (mpi_mod, "call_kernel")}[place]
    original = getattr(module, name)

    def stopping(*args: Any, **kw: Any) -> Any:
        _stop(how)
        return original(*args, **kw)

    setattr(module, name, stopping)
    prog = _program()
    setup = {"timeout": WATCHDOG} if place == "setup" else {}
    mpi_mod.MPIExecutor(prog, comm, **setup).run(_feeds(prog), timeout=WATCHDOG)


def stops_unwatched() -> None:
    """No watchdog: rank VICTIM is stopped (SIGSTOP) before an AllSumReduce that the others wait
    in. The script records its own places; the launcher, at its timeout, names the rank."""
    from spmdrules.runtime.progress import at

    layer = AllSumReduce(MPIPartition(comm).create_cartesian_topology_partition([n]))
    at("step 1: before the sum")
    _stop("stop")
    at("step 2: the sum")
    layer(np.ones(10))


CASES: dict[str, Callable[[], None]] = {f.__name__: f for f in (
    shapes, shapes_sum_reduce, rank_sets, rank_sets_layer, missing_rank, global_shapes, axes,
    raise_before, raise_silent, raise_inside, exit_sum_reduce, exit_broadcast, exit_repartition, exit_zero,
    executor_program, executor_feeds, executor_kernel, executor_dies, child_processes,
    executor_stops, stops_unwatched,
)}


if __name__ == "__main__":
    with abort_on_error():
        try:
            CASES[sys.argv[1]]()
        except SpmdError as e:
            typed(e)
        else:
            say(f"DONE {rank}")
    mark_done()
