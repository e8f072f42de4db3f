"""What a windowed op reads across its input's blocks: the halo of a spatially split
convolution, pooling or upsampling, described once for the lowering (which builds its
HaloExchange, ``execution/halo.py``) and for the cost model (which prices it, ``auto/cost.py``).

A windowed op (conv with ``spatial_sharding``, windowed pool2d/pool3d) whose input is cut along a
spatial dim computes its output block from a slab: its own input block extended by what its
windows read of the neighbouring blocks, one-sided where the windows are (seed 003). A
conv2d_transpose's slab holds every input position whose window reaches into its output block;
an interpolation's (nearest_interp, bilinear_interp) every source position of its output block.
``exchange`` counts what that HaloExchange moves; its adjoint returns the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import shard_slices
from spmdrules.core.tables import OpTable, caller
from spmdrules.engine.resampling import METHODS, Resampling, resampling
from spmdrules.engine.windows import channel_axis, geometry, needed_span
from spmdrules.graph.shapes.conv import conv_shapes
from spmdrules.graph.shapes.pool import kernel_of
from spmdrules.runtime.decomposition import box_volume, intersect
from spmdrules.runtime.windows import Window

Box = tuple[tuple[int, int], ...]
Coord = tuple[int, ...]
Shape = tuple[int, ...]

#: attribute the lowering sets on an op whose input 0 is a halo-extended slab
HALO = "_halo"

Reads = Sequence[Window | Resampling]
@dataclass(frozen=True, slots=True)
class HaloWindows:
    """What a windowed op reads of its input 0: ``reads(op, x_shape, input_shapes, attrs)``
    gives one window (or resampling) per spatial dim, None when each output block reads only its
    own input block (a global pool); ``transposed`` reads them as a transposed conv does."""

    reads: Callable[[str, Shape, Sequence[Any], Mapping[str, Any]], Reads | None]
    transposed: bool = False


#: op name -> the windows it reads: the ops the lowering gives a halo exchange where a spatial
#: dim of their input is split (``register_windows``)
HALO_OPS: Final[OpTable[HaloWindows]] = OpTable("halo window")


def register_windows(names: Sequence[str], windows: HaloWindows, *,
                     origin: str | None = None) -> None:
    """Give each op of ``names`` a halo exchange where its input is spatially split."""
    HALO_OPS.add_all(names, windows, origin if origin is not None else caller(1))


def _spatial(xs: Shape, attrs: Mapping[str, Any]) -> list[int]:
    return [xs[d] for d in spatial_dims(xs, attrs)]


def _resampled(op: str, xs: Shape, _: Sequence[Any], attrs: Mapping[str, Any]) -> Reads:
    return resampling(op, _spatial(xs, attrs), attrs)


def _pooled(op: str, xs: Shape, _: Sequence[Any], attrs: Mapping[str, Any]) -> Reads | None:
    if attrs.get("global_pooling", False) or attrs.get("adaptive", False):
        return None
    sizes = _spatial(xs, attrs)
    return geometry(op, sizes, kernel_of(op, attrs, len(sizes)), attrs,
                    ceil_mode=bool(attrs.get("ceil_mode", False))).windows


def _convolved(op: str, xs: Shape, input_shapes: Sequence[Any], attrs: Mapping[str, Any]
               ) -> Reads:
    return conv_shapes(op, xs, tuple(input_shapes[1]), attrs)[1].windows


register_windows(("conv2d", "conv3d", "depthwise_conv2d"), HaloWindows(_convolved))
register_windows(("conv2d_transpose",), HaloWindows(_convolved, transposed=True))
register_windows(("pool2d", "pool3d"), HaloWindows(_pooled))
register_windows(tuple(METHODS), HaloWindows(_resampled))



def spatial_dims(shape: Sequence[int], attrs: Mapping[str, Any]) -> list[int]:
    c = channel_axis(str(attrs.get("data_format", "NCHW")), len(shape))
    return [d for d in range(1, len(shape)) if d != c]


def needed_box(op: str, attrs: Mapping[str, Any], input_shapes: Sequence[Any],
               input_attrs: Sequence[Any], out_shape: Sequence[int], out_attr: DistAttr,
               coord: Coord) -> Box | None:
    """The global box of input 0 that the rank at ``coord`` needs, or None when its own block
    suffices (no spatial dim is cut, or the op pools whole bins)."""
    windows = HALO_OPS.lookup(op)
    if windows is None:
        return None
    xs, x_attr = tuple(input_shapes[0]), input_attrs[0]
    sp = spatial_dims(xs, attrs)
    if not isinstance(x_attr, DistAttr) or not any(x_attr.multi_dims_mapping[d] for d in sp):
        return None
    reads = windows.reads(op, xs, input_shapes, attrs)
    if reads is None:
        return None
    own = shard_slices(xs, x_attr, coord)
    outb = shard_slices(tuple(out_shape), out_attr, coord)
    box = [(s.start, s.stop) for s in own]
    grown = False
    transposed = windows.transposed
    for i, d in enumerate(sp):
        o = range(outb[d].start, outb[d].stop)
        lo, hi = needed_span(reads[i], xs[d], o, transposed=transposed)
        if hi <= lo:
            continue
        a, b = box[d]
        if lo < a or hi > b:
            box[d] = (min(a, lo), max(b, hi))
            grown = True
    return tuple(box) if grown else None


def groups_of(coords: Mapping[int, Coord], mesh_dims: Sequence[int]) -> dict[int, list[int]]:
    """Process id -> the processes of its neighbour group (the same coordinate on every mesh dim
    but ``mesh_dims``), ordered by their coordinate on ``mesh_dims``."""
    key = {p: tuple(x for m, x in enumerate(c) if m not in mesh_dims) for p, c in coords.items()}
    out: dict[int, list[int]] = {}
    for p in coords:
        members = [q for q in coords if key[q] == key[p]]
        out[p] = sorted(members, key=lambda q: tuple(coords[q][m] for m in mesh_dims))
    return out


def exchange_pieces(own: Mapping[int, Box], need: Mapping[int, Box], group: Sequence[int],
                    p: int) -> list[tuple[int, Box]]:
    """(owner, box) of every piece of ``p``'s needed box that another member of its group owns."""
    out = []
    for q in group:
        if q == p:
            continue
        inter = intersect(own[q], need[p])
        if inter is not None:
            out.append((q, inter))
    return out



@dataclass(frozen=True, slots=True)
class Exchange:
    """What an op's HaloExchange moves: the mesh dims it runs over, the elements the busiest
    process receives (``most``) and the elements all receive (``total``)."""

    mesh_dims: tuple[int, ...]
    most: int
    total: int


def exchange(op: str, attrs: Mapping[str, Any], input_shapes: Sequence[Any],
             input_attrs: Sequence[DistAttr], out_shape: Sequence[int], out_attr: DistAttr
             ) -> Exchange | None:
    """The halo exchange the lowering gives ``op`` with these layouts, or None where it needs
    none: each process receives the pieces of its needed box (``needed_box``) that another
    process of its neighbour group owns."""
    mesh = out_attr.mesh
    coords = {p: tuple(int(x) for x in c)
              for p, c in zip(mesh.process_ids, np.ndindex(*mesh.shape), strict=True)}
    xs, x_attr = tuple(input_shapes[0]), input_attrs[0]
    own: dict[int, Box] = {}
    need: dict[int, Box] = {}
    for p, c in coords.items():
        own[p] = tuple((s.start, s.stop) for s in shard_slices(xs, x_attr, c))
        box = needed_box(op, attrs, input_shapes, input_attrs, out_shape, out_attr, c)
        need[p] = own[p] if box is None else box
    if need == own:
        return None
    sp = spatial_dims(xs, attrs)
    mesh_dims = tuple(sorted({m for d in sp for m in x_attr.multi_dims_mapping[d]}))
    grp = groups_of(coords, mesh_dims)
    got = [sum(box_volume(b) for _, b in exchange_pieces(own, need, grp[p], p)) for p in coords]
    return Exchange(mesh_dims, max(got), sum(got))


__all__ = ["HALO", "HALO_OPS", "Exchange", "HaloWindows", "exchange", "exchange_pieces",
           "groups_of", "needed_box", "register_windows", "spatial_dims"]
