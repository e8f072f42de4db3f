"""Benchmark the partition runtime's primitives against the plain MPI collectives.

Run:  mpiexec -n 4 python bench/runtime.py      (and with -n 2)

Each primitive runs in the same job as the plain mpi4py collective that moves the same data,
with the two interleaved call by call:

    Broadcast      (root -> the k - 1 others)   vs  Bcast
    Broadcast+self (root -> all k, root copies) vs  Bcast
    SumReduce      (all -> 1 worker)            vs  Reduce(SUM)
    AllSumReduce   (all workers)                vs  Allreduce(SUM)
    Repartition    ([k, 1] -> [1, k] grid)      vs  Alltoallv
    HaloExchange   (1-row halo each side, [k,1]) vs  2 Sendrecv into the slab (+ own copy)

at 8 KiB, 1 MiB and 16 MiB of float64 per worker.  A call's time is the slowest rank's
(barrier, then time, then max over ranks); the two alternate which goes first.  The table
reports medians, the throughput ratio (median collective time / median primitive time: >= 1
means the primitive is at least as fast), the median of the per-repeat ratios of adjacent
calls ("paired", less sensitive to load from other processes on a shared machine), the bytes
the primitive moved to other workers per call (handed to MPI, or written into their memory
through a shared-memory window; summed over ranks) against the minimum the data movement
needs, and the bytes Python allocated per steady-state call (tracemalloc; numpy reports its
buffers to it).  Broadcast+self must also hand the root a copy of its input (never in place),
which Bcast does not: a line after the table times it, for information, against Bcast followed
by the root's own copy, the same result with plain MPI.  The last line gives the allocations
of HaloExchange's steady calls.  Each
primitive runs twice: as built by default (steady calls move data with the plan of the
agreed structure while a nonblocking Allgather of array headers checks that structure on
every worker), and with ``check_structure=False`` (marked *), where only the first call
agrees on the structure.  Targets: ratio >= 0.9 at 1 MiB and above, SumReduce >= 1.0.
On an oversubscribed machine shared with other jobs, run it several times and take medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# MPICH waits by polling and yields the CPU every MPIR_CVAR_POLLS_BEFORE_YIELD polls.  With
# no more ranks than cores, yielding only hands the core to unrelated processes, so spin;
# oversubscribed, ranks must yield to each other.  Set before MPI starts (an explicit
# setting in the environment wins).
RANKS = int(os.environ.get("PMI_SIZE", "1"))
os.environ.setdefault(
    "MPIR_CVAR_POLLS_BEFORE_YIELD", "0" if (os.cpu_count() or 1) >= RANKS else "1000"
)

from mpi4py import MPI  # noqa: E402

from spmdrules.runtime import (  # noqa: E402
    AllSumReduce,
    Broadcast,
    HaloExchange,
    MPIPartition,
    Repartition,
    SumReduce,
    Window,
    zero_volume_tensor,
)

SIZES = {"8KiB": 8 * 1024, "1MiB": 1024 * 1024, "16MiB": 16 * 1024 * 1024}
REPEATS = {"8KiB": 300, "1MiB": 150, "16MiB": 40}
WARMUP = 3


# Every array of the benchmark, inputs of the primitives and buffers of the collectives alike,
# starts PAGE_OFFSET bytes into a memory page: copies between arrays at different offsets in
# their pages (MPICH's cross-process copy included) run up to a third slower, so leaving
# offsets to the allocator's state would make either side win by chance.  16 is where
# glibc puts large (mmap-ed) numpy arrays.
PAGE_OFFSET = 16


def page_array(shape: int | tuple[int, ...], rng: np.random.Generator | None = None) -> Any:
    """A float64 array at PAGE_OFFSET in its page, random if ``rng`` is given."""
    dims = (shape,) if isinstance(shape, int) else shape
    nbytes = int(np.prod(dims)) * 8
    raw = np.empty(nbytes + 8192, dtype=np.uint8)
    start = (-raw.ctypes.data) % 4096 + PAGE_OFFSET
    out = raw[start : start + nbytes].view(np.float64).reshape(dims)
    if rng is not None:
        out[...] = rng.random(dims)
    return out


def timed(comm: Any, fn: Callable[[], object]) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return float(comm.allreduce(dt, op=MPI.MAX))


def allocated_per_call(fn: Callable[[], object], calls: int = 5) -> int:
    """Peak bytes allocated (tracemalloc) during steady-state calls, per call."""
    fn()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(calls):
        fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return max(0, peak)


class Case:
    """One primitive and its baseline collective, sized for ``nbytes`` per worker."""

    def __init__(self, name: str, comm: Any, nbytes: int, check: bool) -> None:
        self.name = name
        self.comm = comm
        k, me = comm.size, comm.rank
        n = nbytes // 8
        P_world = MPIPartition(comm)
        P_all = P_world.create_cartesian_topology_partition([k])
        P_root = P_world.create_partition_inclusive([0]).create_cartesian_topology_partition([1])
        rng = np.random.default_rng(me)
        self.minimum = 0
        self.same_result: Callable[[], object] | None = None
        self.primitive: Callable[[], object]
        self.baseline: Callable[[], object]
        layer: Broadcast | SumReduce | AllSumReduce | Repartition | HaloExchange
        if name == "Broadcast":
            # the root sends, the other k - 1 workers receive: Bcast's data movement
            P_rest = P_world.create_partition_inclusive(np.arange(1, k))
            P_rest = P_rest.create_cartesian_topology_partition([k - 1])
            layer = Broadcast(P_root, P_rest, check_structure=check)
            x = page_array(n, rng) if me == 0 else zero_volume_tensor()
            buf = page_array(n, rng)
            self.primitive = lambda: layer(x)
            self.baseline = lambda: comm.Bcast(buf, root=0)
            self.minimum = (k - 1) * nbytes
        elif name == "Broadcast+self":
            # the root is also a destination, so it returns a copy as well (never in place)
            layer = Broadcast(P_root, P_all, check_structure=check)
            x = page_array(n, rng) if me == 0 else zero_volume_tensor()
            buf = page_array(n, rng)
            own = page_array(n)
            self.primitive = lambda: layer(x)
            self.baseline = lambda: comm.Bcast(buf, root=0)

            def same_result() -> None:  # the same result with plain MPI: the root's copy too
                comm.Bcast(buf, root=0)
                if me == 0:
                    np.copyto(own, buf)

            self.same_result = same_result
            self.minimum = (k - 1) * nbytes
        elif name == "SumReduce":  # every worker contributes, the root receives the sum
            layer = SumReduce(P_all, P_root, check_structure=check)
            x = page_array(n, rng)
            out = page_array(n)
            self.primitive = lambda: layer(x)
            self.baseline = lambda: comm.Reduce(x, out if me == 0 else None, MPI.SUM, root=0)
            self.minimum = (k - 1) * nbytes
        elif name == "AllSumReduce":
            layer = AllSumReduce(P_all, check_structure=check)
            x = page_array(n, rng)
            out = page_array(n)
            self.primitive = lambda: layer(x)
            self.baseline = lambda: comm.Allreduce(x, out, MPI.SUM)
            self.minimum = 2 * (k - 1) * nbytes  # reduce-scatter + allgather lower bound
        elif name == "Repartition":
            rows = k * max(1, round(float(np.sqrt(n / k))))
            cols = max(k, (n // (rows // k)) // k * k)
            local = (rows // k, cols)
            P_x = P_world.create_cartesian_topology_partition([k, 1])
            P_y = P_world.create_cartesian_topology_partition([1, k])
            layer = Repartition(P_x, P_y, check_structure=check)
            x = page_array(local, rng)
            send = page_array(x.size, rng)
            recv = page_array(x.size)
            piece = x.size // k
            counts = [piece] * k
            displs = [i * piece for i in range(k)]
            self.primitive = lambda: layer(x)
            self.baseline = lambda: comm.Alltoallv(
                [send, counts, displs, MPI.DOUBLE], [recv, counts, displs, MPI.DOUBLE]
            )
            self.minimum = k * (k - 1) * piece * 8
            nbytes = x.nbytes
        elif name == "HaloExchange":
            # a window of 3 rows with padding 1 along the split axis: every worker needs one row
            # (``nbytes``) from each neighbour; the slab holds its own 2 rows and the halo rows
            P_x = P_world.create_cartesian_topology_partition([k, 1])
            layer = HaloExchange(P_x, [Window(3, padding=1), None])
            x = page_array((2, n), rng)
            up = me - 1 if me > 0 else MPI.PROC_NULL
            down = me + 1 if me < k - 1 else MPI.PROC_NULL
            lo = 1 if me > 0 else 0
            slab = page_array((2 + lo + (1 if me < k - 1 else 0), n))
            nothing = page_array(n)  # the receive buffer of an exchange with PROC_NULL

            def sendrecv() -> None:  # the same slab with plain MPI
                np.copyto(slab[lo:lo + 2], x)
                comm.Sendrecv(x[0], dest=up, recvbuf=slab[lo + 2] if me < k - 1 else nothing,
                              source=down)
                comm.Sendrecv(x[1], dest=down, recvbuf=slab[0] if me > 0 else nothing,
                              source=up)

            self.primitive = lambda: layer(x)
            self.baseline = sendrecv
            self.minimum = 2 * (k - 1) * nbytes
        else:  # pragma: no cover
            raise ValueError(name)
        self.layer = layer
        self.nbytes = nbytes

    def interleaved(
        self, baseline: Callable[[], object], repeats: int
    ) -> tuple[list[float], list[float]]:
        """Times of the primitive and of ``baseline``, called in turn (alternating which first)."""
        prim, base = [], []
        for i in range(repeats):
            if i % 2:
                base.append(timed(self.comm, baseline))
                prim.append(timed(self.comm, self.primitive))
            else:
                prim.append(timed(self.comm, self.primitive))
                base.append(timed(self.comm, baseline))
        return prim, base

    def run(self, repeats: int) -> dict[str, float]:
        comm = self.comm
        for _ in range(WARMUP):
            self.primitive()
            self.baseline()
        before = self.layer.bytes_sent
        first = self.primitive()
        sent = comm.allreduce(self.layer.bytes_sent - before)
        again = self.primitive()
        same_buffer = all(comm.allgather(again is first or getattr(again, "size", 1) == 0))
        prim, base = self.interleaved(self.baseline, repeats)
        same: list[float] = []
        if self.same_result is not None:  # apart, so the comparison above stays as it is
            prim2, same = self.interleaved(self.same_result, repeats)
        alloc = comm.allreduce(allocated_per_call(self.primitive), op=MPI.MAX)
        tp, tb = statistics.median(prim), statistics.median(base)
        return {
            "t_prim": tp,
            "t_base": tb,
            "ratio": tb / tp,
            "paired": statistics.median(b / p for b, p in zip(base, prim, strict=True)),
            "sent": float(sent),
            "min": float(self.minimum),
            "alloc": float(alloc),
            "reused": float(same_buffer),
            "same_result": statistics.median(same) / statistics.median(prim2) if same else 0.0,
        }


def halo_allocations(comm: Any, nbytes: int) -> tuple[int, int]:
    """Bytes allocated per steady forward and adjoint call of a HaloExchange (a 3-wide
    window along the split axis of a [k] partition), max over ranks."""
    P_x = MPIPartition(comm).create_cartesian_topology_partition([comm.size, 1])
    layer = HaloExchange(P_x, [Window(3, padding=1), None])
    x = page_array((max(1, nbytes // 8 // 512), 512), np.random.default_rng(comm.rank))
    slab = layer(x)
    grad = np.ones_like(slab)
    layer.adjoint(grad)
    forward = allocated_per_call(lambda: layer(x))
    adjoint = allocated_per_call(lambda: layer.adjoint(grad))
    layer.free()
    return comm.allreduce(forward, op=MPI.MAX), comm.allreduce(adjoint, op=MPI.MAX)


BASELINE = {
    "Broadcast": "Bcast",
    "Broadcast+self": "Bcast",
    "SumReduce": "Reduce",
    "AllSumReduce": "Allreduce",
    "Repartition": "Alltoallv",
    "HaloExchange": "Sendrecv",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (smoke test)")
    parser.add_argument("--only", nargs="*", default=None, help="primitives to run")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rows = []
    halo = {label: halo_allocations(comm, nbytes) for label, nbytes in SIZES.items()}
    for check in (True, False):
        for name in BASELINE:
            if (args.only and name not in args.only) or (name == "HaloExchange" and not check):
                continue  # HaloExchange has no check_structure switch
            for label, nbytes in SIZES.items():
                case = Case(name, comm, nbytes, check)
                repeats = 3 if args.quick else REPEATS[label]
                rows.append((name + ("" if check else "*"), label, case.nbytes, case.run(repeats)))
    if comm.rank == 0:
        print(f"partition runtime vs plain MPI collectives, {comm.size} ranks on "
              f"{os.cpu_count()} cores, {MPI.Get_library_version().splitlines()[0].strip()}, "
              f"MPIR_CVAR_POLLS_BEFORE_YIELD={os.environ['MPIR_CVAR_POLLS_BEFORE_YIELD']}")
        head = (f"{'primitive':<15}{'size':>7}{'median':>11}{'baseline':>21}{'ratio':>7}"
                f"{'paired':>7}"
                f"{'GB/s':>7}{'sent/call':>13}{'minimum':>13}{'x min':>7}{'alloc/call':>12}"
                f"{'reuse':>6}")
        print(head)
        print("-" * len(head))
        for name, label, nbytes, r in rows:
            target = 1.0 if name.startswith("SumReduce") else 0.9
            ok = "" if label == "8KiB" or r["ratio"] >= target else " (below target)"
            print(
                f"{name:<15}{label:>7}{r['t_prim'] * 1e3:>9.3f}ms"
                f"{BASELINE[name.rstrip('*')]:>10} {r['t_base'] * 1e3:>7.3f}ms{r['ratio']:>7.2f}"
                f"{r['paired']:>7.2f}"
                f"{nbytes / r['t_prim'] / 1e9:>7.2f}{int(r['sent']):>13}{int(r['min']):>13}"
                f"{r['sent'] / r['min'] if r['min'] else 0:>7.2f}{int(r['alloc']):>12}"
                f"{'yes' if r['reused'] else 'no':>6}{ok}"
            )
        print("* = check_structure=False: after the first call the layer skips the per-call "
              "structure check (a nonblocking Allgather overlapping the data movement) and "
              "checks its own input locally.")
        same = [f"{name} {label} {r['same_result']:.2f}" for name, label, _, r in rows
                if r["same_result"] and label != "8KiB"]
        if same:
            print("Broadcast+self against Bcast followed by the root's own copy (the same result "
                  "with plain MPI; for information, the target compares with Bcast): "
                  + ", ".join(same))
        print("HaloExchange (window 3, padding 1, over [k, 1]) bytes allocated per steady call, "
              "forward / adjoint: "
              + ", ".join(f"{label} {f} / {a}" for label, (f, a) in halo.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
