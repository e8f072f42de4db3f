"""Broadcast and SumReduce (seed 000): one implementation, two orientations.

SumReduce sums the subtensors of the workers of a big partition onto the paired workers of a
small one; Broadcast copies them back.  Each is the exact adjoint of the other, so both
public layers wrap one :class:`ReduceBroadcast` core and only swap which direction is the
forward.

Data movement, per reduction group (one small-partition worker and the big-partition
workers paired with it, with the small worker as group rank 0):

* broadcast: of at least ``FLAT_BROADCAST_MIN_BYTES`` to a group of more than two, the source
  sends to every member directly (over shared memory each member copies straight from the
  source's array, all in parallel); smaller ones, and pairs, use ``MPI_Bcast`` on the group
  communicator, or ``MPI_Ibcast`` when the root is also a destination (it makes its own copy
  while the data is in flight);
* reduce: a reduce-scatter with numpy adds (group rank ``j`` sums chunk ``j`` of every
  source's array, in source order, so results are deterministic) followed by a gather of
  the summed chunks to rank 0; groups of two reduce directly at rank 0.  When the group
  shares one node and the tensor has at least ``DIRECT_GATHER_MIN_BYTES``, rank 0's result
  lives in a shared-memory window and every rank adds its chunk straight into it, so the
  gather moves no data (two zero-byte messages per rank order the writes).

Groups are served one at a time in increasing small-partition rank on every worker, which
rules out deadlock when a worker belongs to two groups.  The groups, their thresholds and
their buffer plans are in :mod:`spmdrules.runtime.reduction_group`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spmdrules.runtime._mpi import is_half, mpi
from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.decomposition import ZeroVolumeCache
from spmdrules.runtime.errors import PartitionMismatchError, TensorStructureError
from spmdrules.runtime.partition import MPIPartition, free_communicator, sub_communicator
from spmdrules.runtime.reduction_group import (
    TAG_BROADCAST,
    TAG_REDUCE_SCATTER,
    Group,
    GroupPlan,
    free_plans,
    plan_group,
)
from spmdrules.runtime.reduction_rules import ReductionMatch, match_reduction
from spmdrules.runtime.shared_window import SharedOutputs
from spmdrules.runtime.structure import (
    LocalStructure,
    PlanCache,
    StructureExchange,
    speculate,
)

Array = np.ndarray[Any, Any]


class ReduceBroadcast:
    """The shared core: ``reduce`` from the big partition, ``broadcast`` back to it."""

    def __init__(
        self,
        P_big: MPIPartition,
        P_small: MPIPartition,
        *,
        transpose_big: bool,
        transpose_small: bool,
        preserve_batch: bool,
        op: str,
        big_name: str,
        small_name: str,
        check_structure: bool = True,
        view: dict[str, object] | None = None,
    ) -> None:
        # before anything that depends on the partitions: a worker that raised alone would
        # leave the others waiting
        agree(
            P_big.root,
            op,
            set(P_big.members) | set(P_small.members),
            view or {big_name: describe_partition(P_big), small_name: describe_partition(P_small)},
        )
        if not P_big.same_root(P_small):
            raise PartitionMismatchError(
                f"{op}: {big_name} and {small_name} come from different root communicators; "
                "derive both from one MPIPartition(comm)"
            )
        self.op = op
        self.big_name, self.small_name = big_name, small_name
        self.P_big, self.P_small = P_big, P_small
        self.preserve_batch = preserve_batch
        self.match: ReductionMatch = match_reduction(
            P_big.shape,
            P_small.shape,
            transpose_big=transpose_big,
            transpose_small=transpose_small,
            op=op,
            big_name=big_name,
            small_name=small_name,
        )
        self.in_big, self.in_small = P_big.active, P_small.active
        root = P_big.root
        me = root.Get_rank()
        self.union = tuple(sorted(set(P_big.members) | set(P_small.members)))
        self._structure = (
            StructureExchange(root, self.union, check=check_structure)
            if me in self.union
            else None
        )
        self._structure_bcast = self._structure.twin() if self._structure else None
        self._groups: list[Group] = []
        self.group_members: list[tuple[int, ...]] = []
        for small_rank, big_ranks in enumerate(self.match.groups()):
            dest = P_small.members[small_rank]
            sources = [P_big.members[b] for b in big_ranks]
            members = (dest, *(s for s in sources if s != dest))
            self.group_members.append(members)
            if me not in members:
                continue
            comm = sub_communicator(root, members)
            self._groups.append(
                Group(
                    small_rank=small_rank,
                    comm=comm,
                    size=len(members),
                    my_rank=members.index(me),
                    sources=tuple(members.index(s) for s in sources),
                    shared=SharedOutputs(comm),
                )
            )
        self._reduce_plans: PlanCache[list[GroupPlan]] = PlanCache(free_plans)
        self._bcast_plans: PlanCache[list[GroupPlan]] = PlanCache(free_plans)
        self._zero = ZeroVolumeCache(self.preserve_batch).like
        self.bytes_sent = 0  # payload bytes this worker handed to MPI (headers excluded)

    def free(self) -> None:
        """Free the communicators of this layer (call on every worker of both partitions)."""
        self._reduce_plans.clear()
        self._bcast_plans.clear()
        for g in self._groups:
            g.shared.free()
            free_communicator(g.comm)
        self._groups = []
        if self._structure_bcast is not None:
            self._structure_bcast.free()
        if self._structure is not None:
            self._structure.free()

    # -- helpers -----------------------------------------------------------------------
    def _structures(self, *, reduce: bool) -> list[LocalStructure]:
        ex = self._structure if reduce else self._structure_bcast
        assert ex is not None
        return ex.structures()

    # -- reduce (big -> small) ---------------------------------------------------------
    def reduce(self, x: Array) -> Array:
        """Sum the big partition's subtensors onto the paired small-partition workers."""
        x = np.asarray(x)
        if not (self.in_big or self.in_small):
            return x.copy()
        assert self._structure is not None
        plans = speculate(
            self._structure,
            self._reduce_plans,
            x if self.in_big else None,
            self.op,
            lambda: self._plan(self._structures(reduce=True), reduce=True),
            self._move_reduce,
        )
        for group, plan in zip(self._groups, plans, strict=True):
            if group.i_am_dest:
                return plan.out
        return self._zero(x)

    def _move_reduce(self, plans: list[GroupPlan], x: Array | None) -> None:
        xflat = np.ascontiguousarray(x).reshape(-1) if x is not None else None
        for group, plan in zip(self._groups, plans, strict=True):
            self._reduce_group(group, plan, xflat)

    def _reduce_group(self, g: Group, p: GroupPlan, xflat: Array | None) -> None:
        if g.size == 1:
            assert xflat is not None
            np.copyto(p.out.reshape(-1), xflat)
            return
        MPI = mpi()
        mtype, comm = p.mtype, g.comm
        if p.window is not None:
            MPI.Prequest.Startall(p.ready)
            if g.i_am_dest:
                MPI.Prequest.Startall(p.done)
        reqs = list(p.scatter_recvs)
        if reqs:
            MPI.Prequest.Startall(reqs)
        if g.i_am_source:
            assert xflat is not None
            for j, a, b in p.send_chunks:
                reqs.append(comm.Isend([xflat[a:b], mtype], j, TAG_REDUCE_SCATTER))
            self.bytes_sent += p.send_bytes
        MPI.Request.Waitall(reqs)
        if p.target is not None:
            if p.window is not None and not g.i_am_dest:
                MPI.Request.Waitall(p.ready)  # the target is the destination's result
            _add_pieces(p, p.target, xflat, g.my_rank)
        if p.window is not None:
            if g.i_am_dest:
                MPI.Request.Waitall(p.ready)
                MPI.Request.Waitall(p.done)
                p.window.Sync()  # read the chunks only after every report
                return
            if p.done:
                p.window.Sync()  # the chunk is in memory before the destination hears of it
                MPI.Prequest.Startall(p.done)
                MPI.Request.Waitall(p.done)
            MPI.Request.Waitall(p.ready)
            self.bytes_sent += p.gather_bytes
        elif p.gather:
            MPI.Prequest.Startall(p.gather)
            MPI.Request.Waitall(p.gather)
            self.bytes_sent += p.gather_bytes

    # -- broadcast (small -> big) ------------------------------------------------------
    def broadcast(self, y: Array) -> Array:
        """Copy each small-partition worker's subtensor to its paired big-partition workers."""
        y = np.asarray(y)
        if not (self.in_big or self.in_small):
            return y.copy()
        assert self._structure_bcast is not None
        plans = speculate(
            self._structure_bcast,
            self._bcast_plans,
            y if self.in_small else None,
            self.op,
            lambda: self._plan(self._structures(reduce=False), reduce=False),
            self._move_broadcast,
        )
        for group, plan in zip(self._groups, plans, strict=True):
            if group.i_am_source:
                return plan.out
        return self._zero(y)

    def _move_broadcast(self, plans: list[GroupPlan], y: Array | None) -> None:
        ysrc = np.ascontiguousarray(y) if y is not None else None
        for group, plan in zip(self._groups, plans, strict=True):
            self._broadcast_group(group, plan, ysrc)

    def _broadcast_group(self, g: Group, p: GroupPlan, ysrc: Array | None) -> None:
        mtype = p.mtype
        if g.i_am_dest:
            assert ysrc is not None
            if g.size == 1:
                np.copyto(p.out, ysrc)
                return
            self.bytes_sent += ysrc.nbytes * (g.size - 1)
            if p.flat:
                # every member reads the data straight from this worker's array (single
                # copy over shared memory), in parallel, while this worker makes its copy
                reqs = [g.comm.Isend([ysrc, mtype], j, TAG_BROADCAST) for j in range(1, g.size)]
                if g.i_am_source:
                    np.copyto(p.out, ysrc)
                MPI = mpi()
                MPI.Request.Waitall(reqs)
            elif g.i_am_source:
                # Nonblocking, so this worker makes its own copy while the data is in flight
                # (every member then uses Ibcast: it never matches a blocking Bcast).
                request = g.comm.Ibcast([ysrc, mtype], 0)
                np.copyto(p.out, ysrc)
                request.Wait()
            else:
                g.comm.Bcast([ysrc, mtype], 0)
        elif p.flat:
            p.bcast_recv.Start()
            p.bcast_recv.Wait()
        elif 0 in g.sources:
            g.comm.Ibcast([p.out, mtype], 0).Wait()
        else:
            g.comm.Bcast([p.out, mtype], 0)

    # -- planning ----------------------------------------------------------------------
    def _plan(self, structures: list[LocalStructure], *, reduce: bool) -> list[GroupPlan]:
        """Validate the gathered structures (identically on every worker) and size buffers."""
        P_in = self.P_big if reduce else self.P_small
        in_name = self.big_name if reduce else self.small_name
        slot_of = {m: i for i, m in enumerate(self.union)}
        for rank, member in enumerate(P_in.members):
            if structures[slot_of[member]] is None:  # pragma: no cover - guarded by callers
                raise TensorStructureError(
                    f"{self.op}: the {in_name} worker at index {P_in.index_of(rank)} gave no "
                    "tensor"
                )
        group_structure: list[LocalStructure] = []
        for small_rank, members in enumerate(self.group_members):
            if reduce:
                src_slots = [
                    slot_of[self.P_big.members[b]] for b in self.match.groups()[small_rank]
                ]
                found = {structures[s] for s in src_slots}
                if len(found) != 1:
                    detail = ", ".join(
                        f"{self.P_big.index_of(self.P_big.members.index(self.union[s]))}: "
                        f"{_describe(structures[s])}"
                        for s in src_slots
                    )
                    raise TensorStructureError(
                        f"{self.op}: the {self.big_name} workers that reduce onto the "
                        f"{self.small_name} worker at index {self.P_small.index_of(small_rank)} "
                        f"hold different local tensors ({detail}); give them all the same "
                        "shape and dtype"
                    )
                group_structure.append(found.pop())
            else:
                group_structure.append(structures[slot_of[members[0]]])
        # Buffers sit at the page offset of the array they receive from (see _mpi.py).
        ex = self._structure if reduce else self._structure_bcast
        assert ex is not None
        page_offsets = ex.page_offsets()
        plans: list[GroupPlan] = []
        for g in self._groups:
            st = group_structure[g.small_rank]
            assert st is not None
            dtype, shape = st
            members = self.group_members[g.small_rank]
            offset = [page_offsets[slot_of[m]] for m in members]  # by group rank
            plans.append(plan_group(g, shape, dtype, offset, reduce=reduce))
        return plans


def _describe(st: LocalStructure) -> str:
    return "nothing" if st is None else f"{st[1]} {st[0].name}"


class _ReduceBroadcastLayer:
    """Common front of SumReduce and Broadcast."""

    _forward_reduces: bool

    def __init__(
        self,
        P_x: MPIPartition,
        P_y: MPIPartition,
        transpose_src: bool = False,
        transpose_dest: bool = False,
        preserve_batch: bool = True,
        *,
        check_structure: bool = True,
    ) -> None:
        self.P_x, self.P_y = P_x, P_y
        op = type(self).__name__
        view: dict[str, object] = {
            "P_x": describe_partition(P_x), "P_y": describe_partition(P_y),
            "transpose_src": transpose_src, "transpose_dest": transpose_dest,
            "preserve_batch": preserve_batch, "check_structure": check_structure,
        }
        if self._forward_reduces:
            self.core = ReduceBroadcast(
                P_x, P_y, transpose_big=transpose_src, transpose_small=transpose_dest,
                preserve_batch=preserve_batch, op=op, big_name="P_x", small_name="P_y",
                check_structure=check_structure, view=view,
            )
        else:
            self.core = ReduceBroadcast(
                P_y, P_x, transpose_big=transpose_dest, transpose_small=transpose_src,
                preserve_batch=preserve_batch, op=op, big_name="P_y", small_name="P_x",
                check_structure=check_structure, view=view,
            )

    def forward(self, x: Array) -> Array:
        """Apply the layer to this worker's local input (zero-volume where inactive)."""
        return self.core.reduce(x) if self._forward_reduces else self.core.broadcast(x)

    def adjoint(self, dy: Array) -> Array:
        """Apply the exact transpose of :meth:`forward`."""
        return self.core.broadcast(dy) if self._forward_reduces else self.core.reduce(dy)

    __call__ = forward

    def free(self) -> None:
        """Free the layer's communicators (call on every worker of both partitions)."""
        self.core.free()

    @property
    def bytes_sent(self) -> int:
        """Payload bytes this worker has handed to MPI so far."""
        return self.core.bytes_sent


class SumReduce(_ReduceBroadcastLayer):
    """Sum subtensors on ``P_x`` onto ``P_y`` following the reduction rules of seed 000.

    ``dim(P_x) >= dim(P_y)``; after the optional transposes (reversing a partition's shape)
    ``P_y`` is padded on the left with ones, and along each dimension its shape must equal
    ``P_x``'s or be 1.  Workers pair by transposed index.  The adjoint is a Broadcast.
    """

    _forward_reduces = True


class Broadcast(_ReduceBroadcastLayer):
    """Copy subtensors on ``P_x`` to ``P_y``: the adjoint of ``SumReduce(P_y, P_x)``.

    The rules of seed 000 apply with the roles swapped: ``dim(P_y) >= dim(P_x)`` and ``P_x``
    (after ``transpose_src``) is padded on the left with ones.  The adjoint is a SumReduce.
    """

    _forward_reduces = False


def _add_pieces(p: GroupPlan, target: Array, xflat: Array | None, me: int) -> None:
    """Sum this worker's piece of every source's rows into ``target``, in source order
    (deterministic); the worker's own piece is read in place from ``xflat``."""
    assert p.rows is not None
    lo, hi = p.bounds[me]
    rows = p.rows
    parts = [rows[i] if i >= 0 else xflat[lo:hi] for i in p.order]  # type: ignore[index]
    if len(parts) == 1:
        np.copyto(target, parts[0])
    elif is_half(target.dtype):
        # float16/bfloat16 pieces are summed in float32 and rounded once
        acc = parts[0].astype(np.float32)
        for part in parts[1:]:
            acc += part
        np.copyto(target, acc, casting="unsafe")
    else:
        np.add(parts[0], parts[1], out=target)
        for part in parts[2:]:
            np.add(target, part, out=target)
