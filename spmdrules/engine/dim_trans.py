"""DimTrans: how every output dim of a shape op (reshape, flatten, squeeze, ...) is made from the
input dims, and the sharding inference that follows from it.

A transformation is a tuple with one entry per output dim:

* ``InputDim(d)``: the output dim is input dim ``d``;
* ``Singleton()``: the output dim has size 1 and comes from no input dim;
* ``Flatten(dims)``: the output dim merges several input dims, major first;
* ``Split(dim, shape, index)``: ``dim`` (an InputDim or a Flatten) is cut into ``shape`` and the
  output dim is piece ``index`` of it.

``(6, 12, 24, 48) -> (72, 24, 6, 8)`` is ``(Flatten((InputDim(0), InputDim(1))), InputDim(2),
Split(InputDim(3), (6, 8), 0), Split(InputDim(3), (6, 8), 1))``.

Sharding follows from the transformation alone: a merged dim keeps the sharding of its major
input dim (and co-shards the following ones), a split dim gives its sharding to its first piece.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Union

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError, SpmdError, UnsupportedError


@dataclass(frozen=True, slots=True)
class InputDim:
    dim: int


@dataclass(frozen=True, slots=True)
class Singleton:
    pass


@dataclass(frozen=True, slots=True)
class Flatten:
    dims: tuple[DimTrans, ...]


@dataclass(frozen=True, slots=True)
class Split:
    dim: DimTrans
    shape: tuple[int, ...]
    index: int


DimTrans = Union[InputDim, Singleton, Flatten, Split]  # noqa: UP007 - a runtime alias
Transformation = tuple[DimTrans, ...]

SINGLETON = Singleton()


def flatten(dims: Sequence[DimTrans]) -> DimTrans:
    """Merge ``dims``: no dim is a Singleton, one dim is itself."""
    if not dims:
        return SINGLETON
    if len(dims) == 1:
        return dims[0]
    return Flatten(tuple(dims))


def split(dim: DimTrans, shape: tuple[int, ...], index: int) -> DimTrans:
    """Piece ``index`` of ``dim`` cut into ``shape``: a size-1 piece is a Singleton, and the
    other pieces split ``dim`` as if the size-1 ones were not there (the first piece above 1 is
    the major one, which carries the shards: [6, 8] -> [6, 1, 8] keeps dim 1's shard on 8)."""
    if len(shape) == 1:
        return dim  # a lone piece is the dim itself, size 1 or not (Paddle keeps its shard)
    if shape[index] == 1:
        return SINGLETON
    big = tuple(n for n in shape if n != 1)
    if len(big) == 1:
        return dim
    return Split(dim, big, sum(1 for n in shape[:index] if n != 1))


# ---- reshape ------------------------------------------------------------------------------------
def resolve_shape(src_shape: tuple[int, ...], tgt_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The target shape with ``0`` (copy the source dim) and ``-1`` (inferred) resolved."""
    numel = 1
    for n in src_shape:
        numel *= n
    out = list(tgt_shape)
    infer_at = -1
    known = 1
    for i, n in enumerate(tgt_shape):
        if n == 0:
            if i >= len(src_shape):
                raise RuleArgumentError(
                    f"target shape {list(tgt_shape)}: entry {i} is 0 (copy the input dim) but "
                    f"the input {list(src_shape)} has only {len(src_shape)} dims; give the size"
                )
            out[i] = n = src_shape[i]
        elif n == -1:
            if infer_at >= 0:
                raise RuleArgumentError(
                    f"target shape {list(tgt_shape)} has -1 at entries {infer_at} and {i}; only "
                    "one size can be inferred"
                )
            infer_at = i
            continue
        elif n < 0:
            raise RuleArgumentError(
                f"target shape {list(tgt_shape)}: entry {i} is {n}; sizes must be >= 0, or -1 "
                "to infer one"
            )
        known *= n
    if numel == 0 or known == 0:
        raise UnsupportedError(
            f"reshape of a zero-size tensor ({list(src_shape)} -> {list(tgt_shape)}) has no dim "
            "correspondence to shard; replicate it"
        )
    if infer_at >= 0:
        if numel % known:
            raise RuleArgumentError(
                f"target shape {list(tgt_shape)}: the input {list(src_shape)} has {numel} "
                f"elements, not a multiple of {known}, so the -1 cannot be inferred"
            )
        out[infer_at] = numel // known
    elif known != numel:
        raise RuleArgumentError(
            f"target shape {list(tgt_shape)} has {known} elements but the input "
            f"{list(src_shape)} has {numel}; the sizes must multiply to the same number"
        )
    return tuple(out)


def reshape_plan(
    src_shape: tuple[int, ...], tgt_shape: tuple[int, ...]
) -> tuple[Transformation, tuple[int, ...]]:
    """(transformation, resolved target shape) of ``reshape(src_shape -> tgt_shape)``, memoised.

    Leading dims that the target keeps as they are (same size, above 1) are matched one to one
    whatever their size, so the memo is keyed with them set to 2: a new batch size or sequence
    length reuses the plan. An invalid target is resolved again on the real shapes, so that its
    error names the real sizes.
    """
    k = 0
    n = min(len(src_shape), len(tgt_shape))
    while k < n and src_shape[k] == tgt_shape[k] and src_shape[k] > 1:
        k += 1
    if k == 0:
        return _plan(src_shape, tgt_shape)
    canon = (2,) * k
    try:
        trans, tgt = _plan(canon + src_shape[k:], canon + tgt_shape[k:])
    except SpmdError:
        return _plan(src_shape, tgt_shape)
    return trans, src_shape[:k] + tgt[k:]


@functools.lru_cache(maxsize=4096)
def _plan(
    src_shape: tuple[int, ...], tgt_shape: tuple[int, ...]
) -> tuple[Transformation, tuple[int, ...]]:
    tgt = resolve_shape(src_shape, tgt_shape)
    return _match_groups(src_shape, tgt), tgt


@functools.lru_cache(maxsize=4096)
def make_reshape_trans(src_shape: tuple[int, ...], tgt_shape: tuple[int, ...]) -> Transformation:
    """The transformation of ``reshape(src_shape -> tgt_shape)``; the target may hold 0 and -1.

    Dims are matched greedily left to right into groups of equal element count; a group of
    several source dims is a Flatten (size-1 source dims left out), a group of several target dims
    splits it. Size-1 dims on either side pair with nothing.
    """
    return _match_groups(src_shape, resolve_shape(src_shape, tgt_shape))


# InputDim values are immutable: share them instead of building one per use.
_INPUT_DIMS: Final = tuple(InputDim(i) for i in range(64))


def _input_dim(i: int) -> InputDim:
    return _INPUT_DIMS[i] if i < 64 else InputDim(i)


def _match_groups(src_shape: tuple[int, ...], tgt: tuple[int, ...]) -> Transformation:
    out: list[DimTrans] = []
    ns, nt = len(src_shape), len(tgt)
    i = j = 0
    while i < ns or j < nt:
        s = src_shape[i] if i < ns else 1
        t = tgt[j] if j < nt else 1
        if s == 1 and t != 1:
            i += 1  # a size-1 source dim vanishes
            continue
        if t == 1 and s != 1:
            j += 1
            out.append(SINGLETON)
            continue
        src_dims = [i] if i < ns else []
        pieces = [t] if j < nt else []
        i += 1
        j += 1
        while s != t:
            if s < t:
                s *= src_shape[i]
                src_dims.append(i)
                i += 1
            else:
                t *= tgt[j]
                pieces.append(tgt[j])
                j += 1
        if pieces:
            # a lone size-1 source dim stays itself (Paddle keeps its sharding); in a merge it
            # contributes nothing
            merged = (
                _input_dim(src_dims[0])
                if len(src_dims) == 1
                else flatten([_input_dim(d) for d in src_dims if src_shape[d] > 1])
            )
            if len(pieces) == 1:
                out.append(merged)
            else:
                shape = tuple(pieces)
                out.extend([split(merged, shape, k) for k in range(len(shape))])
    return tuple(out)


# ---- inference ----------------------------------------------------------------------------------
#
# Two switches describe Paddle 3.3.1's two directions:
#
# * ``checked``: a merged dim keeps its major input dim's sharding only if that dim's size divides
#   by its shard count, and co-shards the following sharded dims only while the major dim's size
#   still divides by the growing product, so every shard of the merged dim is one contiguous
#   block. Paddle checks in its forward rule only; ours check in both directions.
# * ``coshard_splits``: a split of a merged dim may carry the co-shard of several input dims
#   (Paddle's forward) or only the major dim's mesh dims (Paddle's reverse, which we follow).
#
# A split then gives its first piece the longest prefix of those mesh dims that divides the
# piece. ``checked=False`` reproduces Paddle's reverse answers, which can cut x and out
# differently (docs/deviations/shape.md); it is kept to recognise them.
def _size(mesh_shape: tuple[int, ...], dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= mesh_shape[d]
    return n


def _divisible_prefix(size: int, dims: tuple[int, ...], mesh_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The longest prefix of ``dims`` whose shard count divides ``size``."""
    n = 1
    for k, d in enumerate(dims):
        n *= mesh_shape[d]
        if size % n:
            return dims[:k]
    return dims


def _merged(
    t: Flatten,
    shape: tuple[int, ...],
    mdm: MultiDims,
    mesh_shape: tuple[int, ...],
    checked: bool,
    coshard: bool,
) -> tuple[int, tuple[int, ...]] | None:
    lead = t.dims[0]
    if not isinstance(lead, InputDim) or not mdm[lead.dim]:
        return None
    dims: tuple[int, ...] = ()
    for d in t.dims if coshard else t.dims[:1]:
        if not isinstance(d, InputDim) or not mdm[d.dim]:
            break
        dims += mdm[d.dim]
    if checked:
        dims = _divisible_prefix(shape[lead.dim], dims, mesh_shape)
        if len(dims) < len(mdm[lead.dim]):
            return None
    return (lead.dim, dims) if dims else None


def _source(
    t: DimTrans,
    shape: tuple[int, ...],
    mdm: MultiDims,
    mesh_shape: tuple[int, ...],
    checked: bool,
    coshard_splits: bool,
) -> tuple[int, tuple[int, ...]] | None:
    """The input dim whose sharding output dim ``t`` takes, with the mesh dims it gets."""
    if isinstance(t, InputDim):
        return (t.dim, mdm[t.dim]) if mdm[t.dim] else None
    if isinstance(t, Flatten):
        return _merged(t, shape, mdm, mesh_shape, checked, True)
    if isinstance(t, Split) and t.index == 0:
        inner = t.dim
        if isinstance(inner, Flatten):
            src = _merged(inner, shape, mdm, mesh_shape, checked, coshard_splits)
        else:
            src = _source(inner, shape, mdm, mesh_shape, checked, coshard_splits)
        if src is None:
            return None
        dims = _divisible_prefix(t.shape[0], src[1], mesh_shape)
        return (src[0], dims) if dims else None
    return None


def infer(
    trans: Transformation,
    shape: tuple[int, ...],
    mdm: MultiDims,
    mesh_shape: tuple[int, ...],
    *,
    checked: bool = True,
    coshard_splits: bool = True,
) -> tuple[MultiDims, MultiDims]:
    """(input mapping, output mapping) for an input of ``shape`` sharded as ``mdm``.

    Every input dim keeps exactly the mesh dims its output dim carries (the other dims of a merge
    are replicated), so the returned pair is consistent.
    """
    if not any(mdm):
        return mdm, ((),) * len(trans)
    kept: list[tuple[int, ...]] = [()] * len(shape)
    out: list[tuple[int, ...]] = []
    for t in trans:
        if type(t) is InputDim:  # the common case, without a call
            dims = mdm[t.dim]
            if dims:
                kept[t.dim] = dims
            out.append(dims)
            continue
        src = _source(t, shape, mdm, mesh_shape, checked, coshard_splits)
        if src is None:
            out.append(())
        else:
            kept[src[0]] = src[1]
            out.append(src[1])
    return tuple(kept), tuple(out)
