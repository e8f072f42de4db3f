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

from spmdrules.runtime.box_exchange import BoxExchange
from spmdrules.runtime.decomposition import Box, balanced_size, balanced_start, box_shape
from spmdrules.runtime.errors import HaloTooWideError, RuntimeSetupError, TensorStructureError
from spmdrules.runtime.layout import GridLayout, layout_from_structures
from spmdrules.runtime.partition import MPIPartition
from spmdrules.runtime.structure import PlanCache, StructureExchange
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

    def local_windows(self, rank: int) -> LocalWindows:
        """Geometry of the windowed axes of rank ``rank``'s slab (they must be trailing)."""
        axes = [d for d, w in enumerate(self.windows) if w is not None]
        return LocalWindows(
            windows=tuple(w for w in self.windows if w is not None),
            in_spans=tuple(self.need_boxes[rank][d] for d in axes),
            out_spans=tuple(self.out_boxes[rank][d] for d in axes),
            in_lengths=tuple(self.layout.global_shape[d] for d in axes),
        )


class HaloExchange:
    """Gather each worker's needed box for windows along some axes of ``P_x``.

    ``windows`` has one entry per tensor axis: a :class:`Window`, or None for an axis the
    windows do not slide along.  ``serve_far=False`` refuses (HaloTooWideError) halos wider
    than the neighbouring block instead of serving them from further away.
    """

    def __init__(
        self, P_x: MPIPartition, windows: Sequence[Window | None], *, serve_far: bool = True
    ) -> None:
        if len(windows) != P_x.dim:
            raise RuntimeSetupError(
                f"HaloExchange: {len(windows)} windows for P_x of shape {P_x.shape}; give one "
                "entry (Window or None) per partition axis"
            )
        self.P_x = P_x
        self.windows = tuple(windows)
        self.serve_far = serve_far
        self._structure = StructureExchange(P_x.root, P_x.members) if P_x.active else None
        self._plans: PlanCache[HaloPlan] = PlanCache()
        self._adjoint_plans: PlanCache[BoxExchange] = PlanCache()
        self._key = b""
        self.plan: HaloPlan | None = None
        self.bytes_sent = 0

    def free(self) -> None:
        """Free the layer's communicator (call on every worker of P_x)."""
        if self._structure is not None:
            self._structure.free()
            self._structure = None

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
        return HaloPlan(layout, tuple(outs), tuple(needs), global_out, ex, self.windows)

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
        """Return this worker's needed box of the global input (its slab)."""
        x = np.asarray(x)
        if self._structure is None:
            return x.copy()
        self._key = self._structure.exchange(x, "HaloExchange")
        self.plan = plan = self._plans.get(self._key, self._build)
        slab = np.empty(box_shape(plan.need_boxes[self.P_x.rank]), dtype=x.dtype)
        plan.exchange.gather(x, slab)
        self.bytes_sent += plan.exchange.bytes_gather
        return slab

    def adjoint(self, dslab: Array) -> Array:
        """Send each slab gradient back to the owners and sum it there (needs a forward)."""
        dslab = np.asarray(dslab)
        if self._structure is None:
            return dslab.copy()
        plan = self.plan
        if plan is None:
            raise RuntimeSetupError(
                "HaloExchange.adjoint: call forward first; the adjoint returns gradients to "
                "the layout of the last forward input"
            )
        key = self._structure.exchange(dslab, "HaloExchange.adjoint")
        for r, st in enumerate(self._structure.structures()):
            expect = box_shape(plan.need_boxes[r])
            if st is None or st[1] != expect:
                raise TensorStructureError(
                    f"HaloExchange.adjoint: the worker of P_x at index {self.P_x.index_of(r)} "
                    f"passed a slab gradient of shape {None if st is None else st[1]}, but its "
                    f"slab has shape {expect}; pass the gradient of the forward output"
                )

        def build() -> BoxExchange:
            if dslab.dtype == plan.layout.dtype:
                return plan.exchange
            assert self._structure is not None
            return BoxExchange(
                self._structure.comm,
                self.P_x.rank,
                dslab.dtype,
                plan.layout.boxes,
                plan.need_boxes,
            )

        ex = self._adjoint_plans.get(self._key + key, build)
        dx = np.empty(box_shape(plan.layout.boxes[self.P_x.rank]), dtype=dslab.dtype)
        ex.scatter_add(dslab, dx)
        self.bytes_sent += ex.bytes_scatter
        return dx

    __call__ = forward
