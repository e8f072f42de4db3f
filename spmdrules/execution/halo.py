"""Halos of spatially sharded convolutions and pooling: which input box a rank's output needs.

A windowed op (conv with ``spatial_sharding``, windowed pool2d/pool3d) whose input is cut along a
spatial dim computes its output block from a slab: its own input block extended by what its
windows read of the neighbouring blocks, one-sided where the windows are (seed 003). The lowering
turns the boxes into a HaloExchange (forward: the neighbours' edges are copied in; adjoint: the
halo's cotangent is added into the neighbours' blocks); the kernels read the slab's position from
the attribute ``HALO_SPANS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.blocks import block_slices
from spmdrules.engine.windows import channels_last, geometry, needed_span
from spmdrules.execution.kernels.conv import HALO_SPANS
from spmdrules.graph.shapes.conv import conv_shapes
from spmdrules.graph.shapes.pool import kernel_of

Box = tuple[tuple[int, int], ...]
Coord = tuple[int, ...]
Array = np.ndarray[Any, Any]

HALO_OPS = ("conv2d", "conv3d", "depthwise_conv2d", "pool2d", "pool3d")

__all__ = ["HALO_OPS", "HALO_SPANS", "assemble", "needed_box"]


def _spatial(shape: Sequence[int], attrs: Mapping[str, Any]) -> list[int]:
    nsp = len(shape) - 2
    return list(range(1, nsp + 1)) if channels_last(attrs) else list(range(2, nsp + 2))


def needed_box(op: str, attrs: Mapping[str, Any], input_shapes: Sequence[Any],
               input_attrs: Sequence[Any], out_shape: Sequence[int], out_attr: DistAttr,
               coord: Coord) -> Box | None:
    """The global box of input 0 that the rank at ``coord`` needs, or None when its own block
    suffices (no spatial dim is cut, or the op pools whole bins)."""
    if op not in HALO_OPS:
        return None
    xs, x_attr = tuple(input_shapes[0]), input_attrs[0]
    sp = _spatial(xs, attrs)
    if not isinstance(x_attr, DistAttr) or not any(x_attr.multi_dims_mapping[d] for d in sp):
        return None
    if op.startswith("pool"):
        if attrs.get("global_pooling", False) or attrs.get("adaptive", False):
            return None
        kernel = kernel_of(op, attrs, len(sp))
        g = geometry(op, [xs[d] for d in sp], kernel, attrs,
                     ceil_mode=bool(attrs.get("ceil_mode", False)))
    else:
        _, g = conv_shapes(op, xs, tuple(input_shapes[1]), attrs)
    own = block_slices(xs, x_attr, coord)
    outb = block_slices(tuple(out_shape), out_attr, coord)
    box = [(s.start, s.stop) for s in own]
    grown = False
    for i, d in enumerate(sp):
        o = range(outb[d].start, outb[d].stop)
        lo, hi = needed_span(g.windows[i], xs[d], o)
        if hi <= lo:
            continue
        a, b = box[d]
        if lo < a or hi > b:
            box[d] = (min(a, lo), max(b, hi))
            grown = True
    return tuple(box) if grown else None


def spans_attr(box: Box, shape: Sequence[int], attrs: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    """The value of ``HALO_SPANS``: the box along the spatial dims."""
    return tuple(box[d] for d in _spatial(shape, attrs))


def assemble(box: Box, blocks: Mapping[Coord, Array], shape: Sequence[int], attr: DistAttr
             ) -> tuple[Array, int]:
    """The box filled from the ranks' blocks (the first holder of each entry; the blocks are
    whole, not partial, so every holder agrees) and the entries copied from other blocks."""
    some = next(iter(blocks.values()))
    arr = np.empty(tuple(hi - lo for lo, hi in box), dtype=some.dtype)
    done = np.zeros(arr.shape, dtype=bool)
    moved = 0
    for c, blk in blocks.items():
        own = block_slices(shape, attr, c)
        inter = [(max(lo, s.start), min(hi, s.stop)) for (lo, hi), s in zip(box, own, strict=True)]
        if any(hi <= lo for lo, hi in inter):
            continue
        dst = tuple(slice(lo - b0, hi - b0) for (lo, hi), (b0, _) in zip(inter, box, strict=True))
        src = tuple(slice(lo - s.start, hi - s.start) for (lo, hi), s in zip(inter, own,
                                                                           strict=True))
        fresh = ~done[dst]
        if fresh.any():
            arr[dst] = np.where(fresh, blk[src], arr[dst])
            moved += int(fresh.sum())
            done[dst] = True
        if done.all():
            break
    if not done.all():
        raise ValueError(f"the box {box} is not covered by the blocks of {attr.mapping_str()}")
    return arr, moved
