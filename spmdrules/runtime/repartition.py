"""Repartition (seed 002): move a tensor from one Cartesian partition to another.

The input may have any decomposition over ``P_x``; the output is always the balanced
decomposition over ``P_y``.  The overlaps between every input block and every output block
are computed once per input structure and the data moves as a multi-dimensional
scatterv/gatherv over the union of the partitions: one message per overlapping pair (see
:mod:`spmdrules.runtime.box_exchange`).
The adjoint moves the data back to the decomposition of the most recent forward input (or
the balanced one if there was none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.box_exchange import BoxExchange
from spmdrules.runtime.decomposition import Box, ZeroVolumeCache, aligned_empty, box_shape
from spmdrules.runtime.errors import PartitionMismatchError, TensorStructureError
from spmdrules.runtime.layout import GridLayout, layout_from_structures
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.shared_window import SharedOutputs
from spmdrules.runtime.structure import PlanCache, StructureExchange, speculate

Array = np.ndarray[Any, Any]

# When the largest output of a repartition has at least this many bytes and all workers share
# one node, the outputs live in a shared-memory window and owners write their pieces straight
# into them (see spmdrules.runtime.shared_window): a strided piece then costs one copy
# instead of a pack plus a transfer.  Smaller repartitions are latency-bound, and the
# handshake costs two messages per pair where a small transfer costs one.
DIRECT_MIN_BYTES = 64 * 1024


@dataclass
class _Plan:
    exchange: BoxExchange
    src_layout: GridLayout
    out: Array | None


def _free_plan(plan: _Plan) -> None:
    plan.exchange.free()


class Repartition:
    """Repartition a tensor from ``P_x`` to ``P_y`` (Cartesian, same dimension as the tensor)."""

    def __init__(
        self,
        P_x: MPIPartition,
        P_y: MPIPartition,
        preserve_batch: bool = True,
        *,
        check_structure: bool = True,
    ) -> None:
        agree(P_x.root, "Repartition", set(P_x.members) | set(P_y.members), {
            "P_x": describe_partition(P_x), "P_y": describe_partition(P_y),
            "preserve_batch": preserve_batch, "check_structure": check_structure,
        })
        if not P_x.same_root(P_y):
            raise PartitionMismatchError(
                "Repartition: P_x and P_y come from different root communicators; derive both "
                "from one MPIPartition(comm)"
            )
        if P_x.dim != P_y.dim:
            raise PartitionMismatchError(
                f"Repartition: P_x has shape {P_x.shape} and P_y has shape {P_y.shape}; both "
                "need the tensor's dimension. Pad the shorter shape with ones (a partition of "
                "shape [3] can become [1, 1, 3] without moving data)"
            )
        self.P_x, self.P_y = P_x, P_y
        self.preserve_batch = preserve_batch
        me = P_x.root.Get_rank()
        self.union = tuple(sorted(set(P_x.members) | set(P_y.members)))
        self.active = me in self.union
        self._slot = self.union.index(me) if self.active else -1
        self._structure = (
            StructureExchange(P_x.root, self.union, check=check_structure)
            if self.active
            else None
        )
        self._adjoint_structure = self._structure.twin() if self._structure else None
        self._forward_plans: PlanCache[_Plan] = PlanCache(_free_plan)
        self._adjoint_plans: PlanCache[_Plan] = PlanCache(_free_plan)
        # output windows, one per direction: a forward output is often the adjoint's input
        self._shared = (
            (SharedOutputs(self._structure.comm), SharedOutputs(self._structure.comm))
            if self._structure is not None
            else None
        )
        self._last_x_layout: GridLayout | None = None
        self._layout_keys: dict[int, tuple[GridLayout, bytes]] = {}
        self._zero = ZeroVolumeCache(self.preserve_batch).like
        self.bytes_sent = 0

    def free(self) -> None:
        """Free the layer's communicator (call on every worker of P_x and P_y)."""
        if self._structure is not None:
            self._forward_plans.clear()
            self._adjoint_plans.clear()
            if self._adjoint_structure is not None:
                self._adjoint_structure.free()
            if self._shared is not None:
                for shared in self._shared:
                    shared.free()
                self._shared = None
            self._structure.free()
            self._structure = self._adjoint_structure = None

    def _slots(self, P: MPIPartition) -> list[int]:
        return [self.union.index(m) for m in P.members]

    def _plan_for(self, src: GridLayout, P_src: MPIPartition, dst: GridLayout,
                  P_dst: MPIPartition, *, adjoint: bool) -> _Plan:
        """The exchange from ``src`` to ``dst`` and this worker's output buffer, bound for
        steady calls (collective: output windows are allocated here)."""
        assert self._structure is not None and self._shared is not None
        owned: list[Box | None] = [None] * len(self.union)
        needed: list[Box | None] = [None] * len(self.union)
        for r, s in enumerate(self._slots(P_src)):
            owned[s] = src.boxes[r]
        for r, s in enumerate(self._slots(P_dst)):
            needed[s] = dst.boxes[r]
        ex = BoxExchange(self._structure.comm, self._slot, dst.dtype, owned, needed)
        shapes = [None if b is None else box_shape(b) for b in needed]
        largest = max((int(np.prod(s)) for s in shapes if s is not None), default=0)
        shared = self._shared[adjoint]
        out: Array | None
        if (largest * dst.dtype.itemsize >= DIRECT_MIN_BYTES and shared.usable()
                and shared.room_for(shapes, dst.dtype)):
            window, outputs = shared.arrays(shapes, dst.dtype)
            ex.bind_shared(window, outputs)
            out = outputs[self._slot]
        else:
            my_shape = shapes[self._slot]
            out = None if my_shape is None else aligned_empty(my_shape, dst.dtype)
            if out is not None:
                ex.bind(out)
        return _Plan(ex, src if not adjoint else dst, out)

    def forward(self, x: Array) -> Array:
        """Move ``x`` (this worker's block on ``P_x``) to the balanced layout on ``P_y``."""
        x = np.asarray(x)
        if self._structure is None:
            return x.copy()

        def build() -> _Plan:
            assert self._structure is not None
            st = self._structure.structures()
            src = layout_from_structures(
                self.P_x, [st[s] for s in self._slots(self.P_x)], "Repartition", "P_x"
            )
            dst = GridLayout.balanced(self.P_y, src.dtype, src.global_shape)
            return self._plan_for(src, self.P_x, dst, self.P_y, adjoint=False)

        plan = speculate(
            self._structure,
            self._forward_plans,
            x if self.P_x.active else None,
            "Repartition",
            build,
            lambda p, local: self._move(p, local, x),
        )
        self._last_x_layout = plan.src_layout
        return plan.out if plan.out is not None else self._zero(x)

    def _move(self, plan: _Plan, local: Array | None, like: Array) -> None:
        out = plan.out if plan.out is not None else self._zero(like)
        plan.exchange.gather(local if local is not None else like, out)
        self.bytes_sent += plan.exchange.bytes_gather

    def adjoint(self, dy: Array) -> Array:
        """Move ``dy`` (balanced on ``P_y``) back to the layout of the last forward input."""
        dy = np.asarray(dy)
        if self._structure is None:
            return dy.copy()
        assert self._adjoint_structure is not None
        last = self._last_x_layout

        def build() -> _Plan:
            assert self._adjoint_structure is not None
            st = self._adjoint_structure.structures()
            src = layout_from_structures(
                self.P_y, [st[s] for s in self._slots(self.P_y)], "Repartition.adjoint", "P_y"
            )
            balanced = GridLayout.balanced(self.P_y, src.dtype, src.global_shape)
            if src.boxes != balanced.boxes:
                raise TensorStructureError(
                    f"Repartition.adjoint: the gradient on P_y (global shape "
                    f"{src.global_shape}) is not balanced; pass the gradient with the layout "
                    "of the forward output"
                )
            if last is not None and last.global_shape == src.global_shape:
                dst = GridLayout(src.dtype, last.global_shape, last.boxes)
            else:
                dst = GridLayout.balanced(self.P_x, src.dtype, src.global_shape)
            return self._plan_for(src, self.P_y, dst, self.P_x, adjoint=True)

        layout_key = b"" if last is None else self._layout_key(last)
        plan = speculate(
            self._adjoint_structure,
            self._adjoint_plans,
            dy if self.P_y.active else None,
            "Repartition.adjoint",
            build,
            lambda p, local: self._move(p, local, dy),
            layout_key,
        )
        return plan.out if plan.out is not None else self._zero(dy)

    def _layout_key(self, layout: GridLayout) -> bytes:
        key = self._layout_keys.get(id(layout))
        if key is None or key[0] is not layout:
            key = (layout, repr(layout.boxes).encode())
            self._layout_keys = {id(layout): key}
        return key[1]

    __call__ = forward
