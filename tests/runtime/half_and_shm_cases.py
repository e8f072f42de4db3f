"""``mpiexec -n 4 python half_and_shm_cases.py``: half-precision data and the shared-memory
fallback (issue 15). Prints ``PASS <case> <rank>`` per case and rank."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from mpi4py import MPI

from spmdrules.runtime import (
    AllSumReduce,
    Broadcast,
    MPIPartition,
    Repartition,
    SharedMemoryFallbackWarning,
    SumReduce,
    balanced_box,
    zero_volume_tensor,
)
from spmdrules.runtime.shared_window import SHM_FREE_ENV

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
P = MPIPartition(comm)
BF16 = np.dtype(ml_dtypes.bfloat16)
HALF = [np.dtype(np.float16), BF16]


def block(G: np.ndarray[Any, Any], P_x: MPIPartition) -> np.ndarray[Any, Any]:
    assert P_x.index is not None
    return G[tuple(slice(a, b) for a, b in balanced_box(G.shape, P_x.shape, P_x.index))]


def repartition_moves_half() -> None:
    P_x = P.create_cartesian_topology_partition([n, 1])
    P_y = P.create_cartesian_topology_partition([1, n])
    for dt in HALF:
        G = (np.arange(7 * 9, dtype=np.float32).reshape(7, 9) / 8).astype(dt)
        layer = Repartition(P_x, P_y)
        y = layer(block(G, P_x))
        assert y.dtype == dt and np.array_equal(y.view(np.uint16), block(G, P_y).view(np.uint16))
        back = layer.adjoint(y)
        assert back.dtype == dt and np.array_equal(back.view(np.uint16),
                                                   block(G, P_x).view(np.uint16))


def sums_accumulate_in_float32() -> None:
    # rank 0 holds 2048, the others 1: float16 adds 2048 + 1 = 2048 (its spacing there is 2),
    # so summing in float16 in rank order gives 2048; float32 gives 2048 + n - 1, rounded once
    big = 2048.0 if rank == 0 else 1.0
    want32 = np.float32(2048.0 + n - 1)
    P_x = P.create_cartesian_topology_partition([n])
    P_y = P.create_partition_inclusive([0]).create_cartesian_topology_partition([1])
    for dt in HALF:
        x = np.full(5, big, dtype=np.float32).astype(dt)
        want = want32.astype(dt)
        s = AllSumReduce(P_x)(x)
        assert s.dtype == dt and np.all(s == want), (dt, s, want)
        r = SumReduce(P_x, P_y)(x)
        if P_y.active:
            assert r.dtype == dt and np.all(r == want), (dt, r, want)
        b = Broadcast(P_y, P_x)(np.full(3, 1.5, dtype=dt) if P_y.active else zero_volume_tensor())
        assert b.dtype == dt and np.all(b == np.array(1.5, dtype=dt))
        # and the float16 order really loses: the check above is not vacuous
        naive = np.array(2048.0, dtype=np.float16)
        for _ in range(n - 1):
            naive = naive + np.float16(1.0)
        assert naive != want32.astype(np.float16)


def _expect_fallback(run: Callable[[], None]) -> None:
    os.environ[SHM_FREE_ENV] = "0"  # as if /dev/shm were full
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            run()
    finally:
        del os.environ[SHM_FREE_ENV]
    assert any(issubclass(w.category, SharedMemoryFallbackWarning) for w in seen), seen


def shm_fallback_repartition() -> None:
    P_x = P.create_cartesian_topology_partition([n, 1])
    P_y = P.create_cartesian_topology_partition([1, n])
    G = np.random.default_rng(0).random((256, 256))  # outputs of 128 KiB: the window path

    def run() -> None:
        y = Repartition(P_x, P_y)(block(G, P_x))
        assert np.array_equal(y, block(G, P_y))

    _expect_fallback(run)


def shm_fallback_sum_reduce() -> None:
    P_x = P.create_cartesian_topology_partition([n])
    P_y = P.create_partition_inclusive([0]).create_cartesian_topology_partition([1])
    x = np.full((128, 128), float(rank + 1))  # 128 KiB over a group of n > 2: the window path

    def run() -> None:
        y = SumReduce(P_x, P_y)(x)
        if P_y.active:
            assert np.all(y == n * (n + 1) / 2)

    _expect_fallback(run)


CASES = [repartition_moves_half, sums_accumulate_in_float32, shm_fallback_repartition,
         shm_fallback_sum_reduce]

if __name__ == "__main__":
    for case in CASES:
        case()
        comm.Barrier()
        sys.stdout.flush()
        os.write(1, f"PASS {case.__name__} {rank}\n".encode())  # one write: lines never interleave
