"""The reduction groups of Broadcast and SumReduce, and what each plans for one tensor structure.

A group is one small-partition worker (group rank 0) and the big-partition workers paired with
it.  For each local tensor structure a group gets a :class:`GroupPlan`: its buffers, placed at
the page offset of the arrays they receive from (see ``_mpi.py``), and the persistent requests of
its steady path.  How the data moves is described in :mod:`spmdrules.runtime.reduce_broadcast`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import mpi, mpi_datatype
from spmdrules.runtime.decomposition import aligned_empty, balanced_sizes, starts_from_sizes
from spmdrules.runtime.shared_window import SharedOutputs

Array = np.ndarray[Any, Any]

# Point-to-point tags of the reduce algorithm (each group has its own communicator).
TAG_REDUCE_SCATTER = 4201
TAG_REDUCE_GATHER = 4202
TAG_BROADCAST = 4203
TAG_REDUCE_READY = 4204  # direct gather: rank 0's previous result may be overwritten
TAG_REDUCE_DONE = 4205  # direct gather: a rank has added its chunk into rank 0's result

# Broadcasts of at least this many bytes go from the source to every member directly (a
# flat tree): over shared memory each member then copies the data once, straight from the
# source's array, and all members copy in parallel.  MPI_Bcast's scatter-allgather moves
# every byte through several workers, which costs more on an oversubscribed node.  Smaller
# broadcasts are latency-bound and use MPI_Bcast's tree.  A pair (one source, one member) gains
# nothing from a flat tree, and MPI_Ibcast lets a source that is also a destination overlap
# its own copy with the transfer better than an Isend does (measured at 16 MiB on 2 ranks:
# 0.93 of MPI_Bcast's throughput against 0.69).
FLAT_BROADCAST_MIN_BYTES = 64 * 1024

# Groups of at most this many workers reduce directly (every source sends everything to
# the destination, which adds): fewer bytes and one round instead of two.
DIRECT_REDUCE_MAX_GROUP = 2

# Reductions of tensors of at least this many bytes, by groups that share one node, sum
# their chunks straight into the destination's result in a shared-memory window (see
# spmdrules.runtime.shared_window) instead of gathering the sums by messages: that saves
# the destination one copy of the tensor.  Smaller ones are latency-bound.
DIRECT_GATHER_MIN_BYTES = 64 * 1024


@dataclass
class Group:
    """One reduction group as seen by a member worker."""

    small_rank: int
    comm: Any
    size: int
    my_rank: int
    sources: tuple[int, ...]  # group ranks holding big-partition data, in big-rank order
    shared: SharedOutputs  # the destination's reduce results, when they are shared

    @property
    def remote_sources(self) -> tuple[int, ...]:
        return tuple(s for s in self.sources if s != self.my_rank)

    @property
    def i_am_dest(self) -> bool:
        return self.my_rank == 0

    @property
    def i_am_source(self) -> bool:
        return self.my_rank in self.sources


@dataclass
class GroupPlan:
    """Buffers of one group for one tensor structure."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    mtype: Any  # the MPI datatype of dtype
    out: Array  # dest: the reduced tensor / source: the broadcast tensor
    bounds: list[tuple[int, int]] = field(default_factory=list)  # flat chunk of each rank
    rows: list[Array] | None = None  # reduce: my chunk of every other source
    acc: Array | None = None  # reduce: my summed chunk (non-dest ranks)
    flat: bool = False  # broadcast: the source sends to every member directly
    # Precomputed steady path: persistent requests for the plan-owned buffers (receives into
    # rows, out and the flat broadcast's out; sends from acc), and what the call must do.
    scatter_recvs: list[Any] = field(default_factory=list)
    send_chunks: list[tuple[int, int, int]] = field(default_factory=list)  # (rank, a, b)
    send_bytes: int = 0
    order: list[int] = field(default_factory=list)  # per source: row index, -1 = my own
    target: Array | None = None  # where my chunk's sum goes
    gather: list[Any] = field(default_factory=list)
    gather_bytes: int = 0
    bcast_recv: Any = None
    # direct gather: the window of the destination's result; the destination sends each
    # rank a go-ahead and awaits its report, the others await the go-ahead and report
    window: Any = None
    ready: list[Any] = field(default_factory=list)
    done: list[Any] = field(default_factory=list)

    def free(self) -> None:
        """Free the persistent requests."""
        for request in (*self.scatter_recvs, *self.gather, *self.ready, *self.done):
            request.Free()
        if self.bcast_recv is not None:
            self.bcast_recv.Free()
        self.scatter_recvs, self.gather, self.bcast_recv = [], [], None
        self.ready, self.done = [], []


def free_plans(plans: list[GroupPlan]) -> None:
    for plan in plans:
        plan.free()


def plan_group(
    g: Group, shape: tuple[int, ...], dtype: np.dtype[Any], offset: list[int], *, reduce: bool
) -> GroupPlan:
    """Size group ``g``'s buffers for tensors of ``shape`` and ``dtype``.

    ``offset`` holds, by group rank, the page offset of each member's array.
    """
    plan = GroupPlan(
        dtype=dtype, shape=shape, mtype=mpi_datatype(dtype), out=np.empty(0, dtype=dtype)
    )
    if reduce:
        # the destination's sum sits where its own input does (0 if it has none)
        out_offset = offset[0] if 0 in g.sources else 0
        n = int(np.prod(shape, dtype=np.int64))
        shapes: list[tuple[int, ...] | None] = [shape] + [None] * (g.size - 1)
        offsets = [out_offset] + [0] * (g.size - 1)
        if (
            g.size > DIRECT_REDUCE_MAX_GROUP
            and n * dtype.itemsize >= DIRECT_GATHER_MIN_BYTES
            and g.shared.usable()
            and g.shared.room_for(shapes, dtype, offsets)
        ):
            plan.window, outs = g.shared.arrays(shapes, dtype, offsets)
            assert outs[0] is not None
            plan.out = outs[0]  # written by every rank, returned by the destination
        elif g.i_am_dest:
            plan.out = aligned_empty(shape, dtype, out_offset)
        direct = g.size <= DIRECT_REDUCE_MAX_GROUP
        sizes = (n,) + (0,) * (g.size - 1) if direct else balanced_sizes(n, g.size)
        starts = starts_from_sizes(sizes)
        plan.bounds = [(a, a + s) for a, s in zip(starts, sizes, strict=True)]
        mine = sizes[g.my_rank]
        lo = starts[g.my_rank] * dtype.itemsize
        plan.rows = [aligned_empty(mine, dtype, offset[src] + lo) for src in g.remote_sources]
        if plan.window is None:
            plan.acc = aligned_empty(mine, dtype, out_offset + lo)
        _prepare_reduce(g, plan)
    else:
        if g.i_am_source:
            plan.out = aligned_empty(shape, dtype, offset[0])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        plan.flat = nbytes >= FLAT_BROADCAST_MIN_BYTES and g.size > 2
        if plan.flat and g.i_am_source and not g.i_am_dest and g.size > 1:
            plan.bcast_recv = g.comm.Recv_init([plan.out, plan.mtype], 0, TAG_BROADCAST)
    return plan


def _prepare_reduce(g: Group, p: GroupPlan) -> None:
    """The steady path of a reduce plan: persistent requests and the order of adds."""
    if g.size == 1:
        return
    assert p.rows is not None
    lo, hi = p.bounds[g.my_rank]
    if hi > lo:
        _prepare_scatter_receives(g, p, lo, hi)
    if g.i_am_source:
        p.send_chunks = [(j, a, b) for j, (a, b) in enumerate(p.bounds)
                         if j != g.my_rank and b > a]
        p.send_bytes = sum(b - a for _, a, b in p.send_chunks) * p.dtype.itemsize
    if p.window is not None:
        _prepare_direct_handshake(g, p, hi - lo)
    else:
        _prepare_gather(g, p, hi - lo)


def _prepare_scatter_receives(g: Group, p: GroupPlan, lo: int, hi: int) -> None:
    """This rank's piece ``[lo, hi)`` of the sum: a receive per remote source, and the order in
    which the sources' rows (``-1``: its own) are added into the target."""
    assert p.rows is not None
    p.scatter_recvs = [
        g.comm.Recv_init([row, p.mtype], src, TAG_REDUCE_SCATTER)
        for row, src in zip(p.rows, g.remote_sources, strict=True)
    ]
    remote = iter(range(len(p.rows)))
    p.order = [-1 if src == g.my_rank else next(remote) for src in g.sources]
    direct = p.window is not None
    p.target = p.out.reshape(-1)[lo:hi] if g.i_am_dest or direct else p.acc


def _prepare_direct_handshake(g: Group, p: GroupPlan, piece: int) -> None:
    """Writes into the destination's window: the destination says when its output is ready
    to be written and each writer when it has written (empty messages)."""
    none, byte = np.empty(0, dtype=np.uint8), mpi().BYTE
    if g.i_am_dest:
        writers = [j for j, (a, b) in enumerate(p.bounds) if j != 0 and b > a]
        p.ready = [g.comm.Send_init([none, byte], j, TAG_REDUCE_READY) for j in writers]
        p.done = [g.comm.Recv_init([none, byte], j, TAG_REDUCE_DONE) for j in writers]
    elif piece > 0:
        p.ready = [g.comm.Recv_init([none, byte], 0, TAG_REDUCE_READY)]
        p.done = [g.comm.Send_init([none, byte], 0, TAG_REDUCE_DONE)]
        p.gather_bytes = piece * p.dtype.itemsize


def _prepare_gather(g: Group, p: GroupPlan, piece: int) -> None:
    """Without a window, the destination gathers every rank's summed piece."""
    if g.i_am_dest:
        out_flat = p.out.reshape(-1)
        p.gather = [
            g.comm.Recv_init([out_flat[a:b], p.mtype], j, TAG_REDUCE_GATHER)
            for j, (a, b) in enumerate(p.bounds)
            if j != 0 and b > a
        ]
    elif piece > 0:
        p.gather = [g.comm.Send_init([p.acc, p.mtype], 0, TAG_REDUCE_GATHER)]
        p.gather_bytes = piece * p.dtype.itemsize
