"""Halos of spatially sharded convolutions, pooling and upsampling, as the lowering and the
kernels run them. What each op reads (its windows, the box a rank needs) is described in
``graph/halo_windows.py``, which the cost model prices from too. The lowering turns the
boxes into a HaloExchange (forward: the neighbours' edges are copied in; adjoint: the halo's
cotangent is added into the neighbours' blocks); the kernels read the slab's position from their
own context (``slab_spans``) when the op carries the attribute ``HALO``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import shard_slices
from spmdrules.graph.halo_windows import (
    HALO,
    HALO_OPS,
    Box,
    Coord,
    HaloWindows,
    exchange_pieces,
    groups_of,
    needed_box,
    register_windows,
    spatial_dims,
)

Array = np.ndarray[Any, Any]

__all__ = ["HALO", "HALO_OPS", "HaloWindows", "assemble", "groups_of", "needed_box",
           "register_windows", "slab_spans", "spatial_dims"]


def slab_spans(ctx: Any) -> tuple[range, ...] | None:
    """A kernel's view (its ``LocalContext``): the global range of its input slab along each
    spatial dim, when the lowering gave it a halo-extended slab; None otherwise."""
    if not ctx.attrs.get(HALO):
        return None
    xs = tuple(ctx.input_shapes[0])
    box = needed_box(ctx.op.removesuffix("_grad"), ctx.attrs, ctx.input_shapes, ctx.input_attrs,
                     ctx.output_shapes[0], ctx.output_attrs[0], ctx.coord)
    if box is None:
        box = tuple((s.start, s.stop) for s in shard_slices(xs, ctx.input_attrs[0], ctx.coord))
    return tuple(range(*box[d]) for d in spatial_dims(xs, ctx.attrs))


def assemble(box: Box, blocks: Mapping[Coord, Array], shape: Sequence[int], attr: DistAttr
             ) -> tuple[Array, int]:
    """The box filled from the ranks' blocks (the first holder of each entry; the blocks are
    whole, not partial, so every holder agrees) and the entries copied from other blocks."""
    some = next(iter(blocks.values()))
    arr = np.empty(tuple(hi - lo for lo, hi in box), dtype=some.dtype)
    done = np.zeros(arr.shape, dtype=bool)
    moved = 0
    for c, blk in blocks.items():
        own = shard_slices(shape, attr, c)
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


def predicted_bytes(lay: Any, slab: Any, mesh_dims: Sequence[int]) -> int:
    """Bytes the HaloExchange of ``lay`` (its blocks) to ``slab`` (the needed boxes) moves."""
    from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES
    from spmdrules.runtime.decomposition import box_volume

    coords = {p: c for p, c in zip(lay.mesh.process_ids, np.ndindex(*lay.mesh.shape),
                                   strict=True)}
    own = {p: lay.box(c) for p, c in coords.items()}
    need = {p: slab.box(c) for p, c in coords.items()}
    grp = groups_of(coords, mesh_dims)
    total = sum(box_volume(b) for p in coords for _, b in exchange_pieces(own, need, grp[p], p))
    return int(total) * DTYPE_BYTES[lay.dtype]
