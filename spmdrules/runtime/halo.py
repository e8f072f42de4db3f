"""HaloExchange: give every worker the input its sliding windows read.

Each worker of a Cartesian ``P_x`` computes a balanced block of the windowed output; the
input positions those windows read (clipped to the tensor; padding is applied locally) form
the worker's *needed box*.  One multi-dimensional gather moves every piece of every needed
box from its owner, corners included, so windows of any kernel size, stride, padding,
dilation or ceil_mode work, on unbalanced inputs, and a halo wider than the neighbouring
block is served from further away.  The adjoint sends the gradient of each needed box back
and sums it on the owners.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.box_exchange import BoxExchange
from spmdrules.runtime.decomposition import (
    Box,
    aligned_empty,
    balanced_size,
    balanced_start,
    box_shape,
)
from spmdrules.runtime.errors import HaloTooWideError, RuntimeSetupError, TensorStructureError
from spmdrules.runtime.layout import GridLayout, layout_from_structures
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.structure import PlanCache, StructureExchange, speculate
from spmdrules.runtime.windows import LocalWindows, Window

Array = np.ndarray[Any, Any]


def halo_boxes(
    layout: GridLayout,
    grid: Sequence[int],
    index: Sequence[int],
    windows: Sequence[Window | None],
) -> tuple[Box, Box]:
    """The (output box, needed input box) of the worker at ``index`` (pure logic)."""
    out: list[tuple[int, int]] = []
    need: list[tuple[int, int]] = []
    rank_box = layout.boxes[int(np.ravel_multi_index(tuple(index), tuple(grid)))]
    for d, w in enumerate(windows):
        if w is None:
            out.append(rank_box[d])
            need.append(rank_box[d])
            continue
        n = layout.global_shape[d]
        m = w.output_length(n)
        j0 = balanced_start(m, grid[d], index[d])
        span = (j0, j0 + balanced_size(m, grid[d], index[d]))
        out.append(span)
        need.append(w.input_span(span, n))
    return tuple(out), tuple(need)


def halo_widths(own: Box, need: Box) -> tuple[tuple[int, int], ...]:
    """Left and right halo width per axis (0 where the need lies inside the owned block)."""
    return tuple(
        (max(0, a - lo), max(0, hi - b)) if hi > lo else (0, 0)
        for (a, b), (lo, hi) in zip(own, need, strict=True)
    )


@dataclass
class HaloPlan:
    """Layout, boxes and data movement for one input structure."""

    layout: GridLayout
    out_boxes: tuple[Box, ...]
    need_boxes: tuple[Box, ...]
    global_out_shape: tuple[int, ...]
    exchange: BoxExchange
    windows: tuple[Window | None, ...]
    slab: Array  # this worker's needed box, filled by every forward of this structure
    key: bytes  # identifies the layout, for the plans of the adjoint

    def local_windows(self, rank: int) -> LocalWindows:
        """Geometry of the windowed axes of rank ``rank``'s slab (they must be trailing)."""
        axes = [d for d, w in enumerate(self.windows) if w is not None]
        return LocalWindows(
            windows=tuple(w for w in self.windows if w is not None),
            in_spans=tuple(self.need_boxes[rank][d] for d in axes),
            out_spans=tuple(self.out_boxes[rank][d] for d in axes),
            in_lengths=tuple(self.layout.global_shape[d] for d in axes),
        )


def _free_plan(plan: HaloPlan) -> None:
    plan.exchange.free()


@dataclass
class _AdjointPlan:
    """Data movement and result buffer of the adjoint, for one slab-gradient structure."""

    exchange: BoxExchange  # the forward's, unless the gradient has another dtype
    dx: Array


class HaloExchange:
    """Gather each worker's needed box for windows along some axes of ``P_x``.

    ``windows`` has one entry per tensor axis: a :class:`Window`, or None for an axis the
    windows do not slide along.  ``serve_far=False`` refuses (HaloTooWideError) halos wider
    than the neighbouring block instead of serving them from further away.
    """

    def __init__(
        self, P_x: MPIPartition, windows: Sequence[Window | None], *, serve_far: bool = True
    ) -> None:
        agree(P_x.root, "HaloExchange", P_x.members, {
            "P_x": describe_partition(P_x), "windows": list(windows), "serve_far": serve_far,
        })
        if len(windows) != P_x.dim:
            raise RuntimeSetupError(
                f"HaloExchange: {len(windows)} windows for P_x of shape {P_x.shape}; give one "
                "entry (Window or None) per partition axis"
            )
        self.P_x = P_x
        self.windows = tuple(windows)
        self.serve_far = serve_far
        self._structure = StructureExchange(P_x.root, P_x.members) if P_x.active else None
        self._adjoint_structure = self._structure.twin() if self._structure else None
        self._plans: PlanCache[HaloPlan] = PlanCache(_free_plan)
        self._adjoint_plans: PlanCache[_AdjointPlan] = PlanCache()
        self.plan: HaloPlan | None = None
        self.bytes_sent = 0

    def free(self) -> None:
        """Free the layer's communicator (call on every worker of P_x)."""
        if self._structure is not None:
            self._plans.clear()
            self._adjoint_plans.clear()
            if self._adjoint_structure is not None:
                self._adjoint_structure.free()
            self._structure.free()
            self._structure = self._adjoint_structure = None

    def _build(self) -> HaloPlan:
        assert self._structure is not None
        layout = layout_from_structures(
            self.P_x, self._structure.structures(), "HaloExchange", "P_x"
        )
        outs, needs = [], []
        for r in range(self.P_x.size):
            out, need = halo_boxes(layout, self.P_x.shape, self.P_x.index_of(r), self.windows)
            outs.append(out)
            needs.append(need)
            if not self.serve_far:
                self._check_near(layout, r, need)
        global_out = tuple(
            n if w is None else w.output_length(n)
            for n, w in zip(layout.global_shape, self.windows, strict=True)
        )
        ex = BoxExchange(self._structure.comm, self.P_x.rank, layout.dtype, layout.boxes, needs)
        # the slab receives most from this worker's own input: same offset in its page
        offset = self._structure.page_offsets()[self.P_x.rank]
        slab = aligned_empty(box_shape(needs[self.P_x.rank]), layout.dtype, offset)
        ex.bind(slab)
        key = repr((layout.dtype.str, layout.global_shape, layout.boxes)).encode()
        return HaloPlan(layout, tuple(outs), tuple(needs), global_out, ex, self.windows, slab, key)

    def _check_near(self, layout: GridLayout, rank: int, need: Box) -> None:
        index = self.P_x.index_of(rank)
        for d, (lo, hi) in enumerate(need):
            if hi <= lo:
                continue
            left = list(index)
            left[d] = max(0, index[d] - 1)
            right = list(index)
            right[d] = min(self.P_x.shape[d] - 1, index[d] + 1)
            reach = (
                layout.boxes[self.P_x.rank_of(left)][d][0],
                layout.boxes[self.P_x.rank_of(right)][d][1],
            )
            if lo < reach[0] or hi > reach[1]:
                raise HaloTooWideError(
                    f"HaloExchange: the worker of P_x at index {index} needs input "
                    f"[{lo}, {hi}) along tensor dim {d}, beyond its neighbours' blocks "
                    f"{list(reach)}; use fewer workers along that axis, or serve_far=True"
                )

    def forward(self, x: Array) -> Array:
        """Return this worker's needed box of the global input (its slab).

        The slab is a buffer of the layer, reused by the next call with the same structure.
        """
        x = np.asarray(x)
        if self._structure is None:
            return x.copy()
        self.plan = plan = speculate(
            self._structure, self._plans, x, "HaloExchange", self._build, self._gather
        )
        return plan.slab

    def _gather(self, plan: HaloPlan, local: Array | None) -> None:
        assert local is not None
        plan.exchange.gather(local, plan.slab)
        self.bytes_sent += plan.exchange.bytes_gather

    def adjoint(self, dslab: Array) -> Array:
        """Send each slab gradient back to the owners and sum it there (needs a forward).

        The result is a buffer of the layer, reused by the next adjoint of the same structure.
        """
        dslab = np.asarray(dslab)
        if self._adjoint_structure is None:
            return dslab.copy()
        plan = self.plan
        if plan is None:
            raise RuntimeSetupError(
                "HaloExchange.adjoint: call forward first; the adjoint returns gradients to "
                "the layout of the last forward input"
            )
        return speculate(
            self._adjoint_structure,
            self._adjoint_plans,
            dslab,
            "HaloExchange.adjoint",
            lambda: self._build_adjoint(plan),
            self._scatter_add,
            plan.key,
        ).dx

    def _build_adjoint(self, plan: HaloPlan) -> _AdjointPlan:
        assert self._adjoint_structure is not None
        structures = self._adjoint_structure.structures()
        for r, st in enumerate(structures):
            expect = box_shape(plan.need_boxes[r])
            if st is None or st[1] != expect:
                raise TensorStructureError(
                    f"HaloExchange.adjoint: the worker of P_x at index {self.P_x.index_of(r)} "
                    f"passed a slab gradient of shape {None if st is None else st[1]}, but its "
                    f"slab has shape {expect}; pass the gradient of the forward output"
                )
        dtypes = {st[0] for st in structures if st is not None}
        if len(dtypes) != 1:
            raise TensorStructureError(
                "HaloExchange.adjoint: the workers of P_x passed slab gradients of dtypes "
                f"{sorted(d.name for d in dtypes)}; give them all one dtype"
            )
        dtype = dtypes.pop()
        ex = plan.exchange
        if dtype != plan.layout.dtype:
            ex = BoxExchange(
                self._adjoint_structure.comm, self.P_x.rank, dtype, plan.layout.boxes,
                plan.need_boxes,
            )
        own = box_shape(plan.layout.boxes[self.P_x.rank])
        offset = self._adjoint_structure.page_offsets()[self.P_x.rank]
        return _AdjointPlan(ex, aligned_empty(own, dtype, offset))

    def _scatter_add(self, plan: _AdjointPlan, local: Array | None) -> None:
        assert local is not None
        plan.exchange.scatter_add(local, plan.dx)
        self.bytes_sent += plan.exchange.bytes_scatter

    __call__ = forward
