"""Paddle's cost-based alignment of the pieces of a join (``AlignDimsSharding``): one layout for
pieces that disagree, instead of a letter merge that would refuse them.

A mesh dim on which every non-empty piece agrees keeps its shard (of an aligned axis) or its
linear pending result. A mesh dim on which they disagree goes to the aligned axis that is
cheapest to reshard to (the fewest elements moved; ties: the lowest axis), or to none. A
description asks for it with ``Policy(align=True)`` (concat, stack).
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.spec import TensorSpec
from spmdrules.engine.policy import LINEAR_REDUCTIONS

#: a mesh dim's placement for one tensor: the tensor dim it shards, the reduce type of its
#: pending result, or None (replicated)
Placement = int | str | None


def _placements(a: DistAttr) -> list[Placement]:
    out: list[Placement] = [None] * a.mesh.ndim
    for tdim, dims in enumerate(a.multi_dims_mapping):
        for md in dims:
            out[md] = tdim
    for md, rt in a.partial_items:
        out[md] = rt
    return out


def _local_numel(t: TensorSpec) -> int:
    # Paddle's GetLocalShape: ceil-divide each sharded dim (by its last mesh dim only).
    mesh_shape = t.attr.mesh.shape
    n = 1
    for size, dims in zip(t.shape, t.attr.multi_dims_mapping, strict=True):
        n *= -(-size // mesh_shape[max(dims)]) if dims else size
    return n


def _nonempty(pieces: Sequence[TensorSpec]) -> list[TensorSpec]:
    return [t for t in pieces if t.shape and t.shape[0] != 0] or [pieces[0]]


def align(pieces: Sequence[TensorSpec], aligned: Sequence[int]) -> tuple[MultiDims, PartialItems]:
    """One mapping for every piece (same rank) and the linear pending results they all share;
    only the ``aligned`` axes keep shards."""
    nonempty = _nonempty(pieces)
    first = nonempty[0].attr
    if all(t.attr == first for t in nonempty):  # already aligned: nothing to choose
        return (
            tuple(d if i in aligned else () for i, d in enumerate(first.multi_dims_mapping)),
            tuple(p for p in first.partial_items if p[1] in LINEAR_REDUCTIONS),
        )
    places = [_placements(t.attr) for t in nonempty]
    agreed = [md for md, where in enumerate(places[0]) if all(p[md] == where for p in places)]
    owner, partial = _kept(places[0], agreed, aligned)
    # Agreed co-shards keep their order (it is the data layout); a chosen axis was unsharded.
    mdm = [tuple(md for md in dims if md in owner) for dims in first.multi_dims_mapping]
    costs = [_local_numel(t) for t in nonempty]
    for md in range(first.mesh.ndim):
        if md in agreed:
            continue
        tdim = _cheapest_axis(nonempty, costs, aligned, set(owner.values()), first.mesh.shape[md])
        if tdim is not None:
            owner[md] = tdim
            mdm[tdim] = (md,)
    return tuple(mdm), partial


def _kept(places: Sequence[Placement], agreed: Sequence[int], aligned: Sequence[int]
          ) -> tuple[dict[int, int], PartialItems]:
    """Of the agreed mesh dims: {mesh dim: the aligned tensor dim it shards}, and the linear
    pending results."""
    owner: dict[int, int] = {}
    partial: list[tuple[int, str]] = []
    for md in agreed:
        where = places[md]
        if isinstance(where, int) and where in aligned:
            owner[md] = where
        elif isinstance(where, str) and where in LINEAR_REDUCTIONS:
            partial.append((md, where))
    return owner, tuple(partial)


def _cost(pieces: Sequence[TensorSpec], costs: Sequence[int], tdim: int, size: int) -> int | None:
    """Elements moved to shard ``tdim`` of every piece over a mesh dim of ``size``; None when a
    piece is shorter than the mesh dim there."""
    cost = 0
    for t, c in zip(pieces, costs, strict=True):
        if t.shape[tdim] < size:
            return None
        if not t.attr.multi_dims_mapping[tdim]:
            cost += c * size
    return cost


def _cheapest_axis(
    pieces: Sequence[TensorSpec], costs: Sequence[int], aligned: Sequence[int],
    taken: set[int], size: int,
) -> int | None:
    """The aligned tensor dim cheapest to shard over a mesh dim of ``size``; ties: the lowest."""
    best: int | None = None
    best_cost = 0
    for tdim in aligned:
        cost = None if tdim in taken else _cost(pieces, costs, tdim, size)
        if cost is not None and (best is None or cost < best_cost):
            best, best_cost = tdim, cost
    return best


__all__ = ["align"]
