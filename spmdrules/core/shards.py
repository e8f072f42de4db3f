"""A simulated mesh in one process: scatter a global array by a DistAttr and gather it back.

This is how a rule is proven by execution: scatter the global inputs as the rule's input attributes
say, run the op's numpy kernel on every mesh coordinate's block, and gather the output by the rule's
output attribute. Gathering checks that replicas agree and reduces pending partials, so a wrong
attribute shows up as a wrong answer (or a replica mismatch).

Blocks follow the balanced decomposition of the runtime: along a dim of length n cut into P parts,
part i holds n//P + (1 if i < n%P else 0) entries. A co-sharded dim is cut into the product of its
mesh dims' sizes, indexed in mixed radix with the first (major) mesh dim outermost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.attr import DistAttr
from spmdrules.core.dtypes import same_values
from spmdrules.core.errors import SpmdError

Coord = tuple[int, ...]
Array = NDArray[Any]


class ShardMismatch(SpmdError):
    """Blocks that should be replicas of each other differ, or a block has the wrong shape."""


class ShardShapeMismatch(ShardMismatch):
    """A block has another shape than its attribute gives it: the attribute describes other
    blocks than the ones computed."""


def balanced_range(n: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of part ``index`` when ``n`` entries are cut into ``parts`` balanced parts."""
    q, r = divmod(n, parts)
    start = q * index + min(index, r)
    return start, start + q + (1 if index < r else 0)


def shard_index(attr: DistAttr, tensor_dim: int, coord: Coord) -> tuple[int, int]:
    """(part index, number of parts) of ``tensor_dim`` at mesh coordinate ``coord``."""
    idx, parts = 0, 1
    for md in attr.multi_dims_mapping[tensor_dim]:
        size = attr.mesh.shape[md]
        idx = idx * size + coord[md]
        parts *= size
    return idx, parts


def shard_slices(shape: Sequence[int], attr: DistAttr, coord: Coord) -> tuple[slice, ...]:
    out = []
    for t, n in enumerate(shape):
        idx, parts = shard_index(attr, t, coord)
        lo, hi = balanced_range(n, parts, idx)
        out.append(slice(lo, hi))
    return tuple(out)


def coords(attr: DistAttr) -> list[Coord]:
    return [tuple(c) for c in np.ndindex(*attr.mesh.shape)]


def _split(x: Array, parts: int, reduce_type: str, rng: np.random.Generator) -> list[Array]:
    """``parts`` arrays that reduce back to ``x`` with ``reduce_type``."""
    if parts == 1:
        return [x.copy()]
    owner = rng.integers(0, parts, size=x.shape)
    if reduce_type in ("sum", "avg"):
        if x.dtype.kind == "b":
            raise SpmdError(f"a {reduce_type} partial cannot hold booleans")
        scale = parts if reduce_type == "avg" else 1
        if x.dtype.kind in "iu":
            pieces = [rng.integers(-3, 4, size=x.shape).astype(x.dtype) for _ in range(parts - 1)]
        else:
            pieces = [rng.standard_normal(x.shape).astype(x.dtype) for _ in range(parts - 1)]
        last = (x * scale - sum(pieces, np.zeros_like(x))).astype(x.dtype)
        return [*pieces, last]
    out = []
    for i in range(parts):
        mine = owner == i
        if reduce_type in ("max", "min"):
            if x.dtype.kind == "b":
                raise SpmdError(f"a {reduce_type} partial of booleans: use any/all")
            delta = np.abs(rng.standard_normal(x.shape)) + 1.0
            if x.dtype.kind in "iu":
                delta = np.ceil(delta)
            other = x - delta if reduce_type == "max" else x + delta
            out.append(np.where(mine, x, other.astype(x.dtype)))
        elif reduce_type == "product":
            out.append(np.where(mine, x, np.ones_like(x)))
        elif reduce_type == "any":
            out.append(np.where(mine, x, np.logical_and(x, rng.integers(0, 2, x.shape) > 0)))
        elif reduce_type == "all":
            out.append(np.where(mine, x, np.logical_or(x, rng.integers(0, 2, x.shape) > 0)))
        else:
            raise SpmdError(f"unknown reduce type {reduce_type!r}")
    return out


def _reduce(pieces: Sequence[Array], reduce_type: str) -> Array:
    stack = np.stack(pieces)
    out: Array
    if reduce_type == "sum":
        out = stack.sum(axis=0).astype(stack.dtype)
    elif reduce_type == "avg":
        out = stack.mean(axis=0).astype(stack.dtype)
    elif reduce_type == "max":
        out = stack.max(axis=0)
    elif reduce_type == "min":
        out = stack.min(axis=0)
    elif reduce_type == "product":
        out = stack.prod(axis=0).astype(stack.dtype)
    elif reduce_type == "any":
        out = np.asarray(stack.any(axis=0))
    elif reduce_type == "all":
        out = np.asarray(stack.all(axis=0))
    else:
        raise SpmdError(f"unknown reduce type {reduce_type!r}")
    return np.asarray(out)


def mask_owners(extent: int, parts: int) -> Array:
    """The process (along a masked mesh dim of ``parts`` processes) that holds each of the
    ``extent`` slices of a masked pending sum when ``scatter`` makes one: a fixed draw per
    (extent, parts), so that two masked operands of one op pair up as one lookup's would."""
    return np.random.default_rng((extent, parts)).integers(0, parts, size=extent)


def _split_masked(x: Array, parts: int, dim: int) -> list[Array]:
    """``parts`` arrays, each zero but on the slices along ``dim`` that ``mask_owners`` gives
    it, where it holds ``x``: a pending sum masked by ``dim``."""
    owner = mask_owners(x.shape[dim], parts).reshape(
        (1,) * dim + (x.shape[dim],) + (1,) * (x.ndim - dim - 1))
    return [np.where(owner == i, x, np.zeros_like(x)) for i in range(parts)]


def _check_masked(pieces: Sequence[Array], dim: int, where: str) -> None:
    """Every slice along ``dim`` is nonzero in one piece at most (the mask's claim)."""
    others = tuple(a for a in range(pieces[0].ndim) if a != dim)
    held = np.stack([np.asarray(p != 0).any(axis=others) for p in pieces])
    shared = np.flatnonzero(held.sum(axis=0) > 1)
    if shared.size:
        raise ShardMismatch(
            f"gather: {where} claims a pending sum masked by tensor dim {dim}, but slice "
            f"{int(shared[0])} of that dim is nonzero on {int(held[:, shared[0]].sum())} "
            "processes; a masked sum holds each slice on one process"
        )


def scatter(
    x: Array | float | int | bool, attr: DistAttr, rng: np.random.Generator | None = None
) -> dict[Coord, Array]:
    """Each mesh coordinate's local block of ``x`` under ``attr`` (partials split into pieces;
    a masked one by ``mask_owners``)."""
    x = np.asarray(x)
    if x.ndim != attr.ndim:
        raise ShardMismatch(
            f"scatter: array of rank {x.ndim} with an attribute of rank {attr.ndim}"
        )
    rng = rng if rng is not None else np.random.default_rng(0)
    partial = attr.partial_items
    # One global piece per combination of partial coordinates, split outer mesh dim first.
    pieces: dict[Coord, Array] = {(): x}
    masks = dict(attr.mask_items)
    for md, rt in partial:
        nxt: dict[Coord, Array] = {}
        n = attr.mesh.shape[md]
        for key, val in pieces.items():
            split = _split_masked(val, n, masks[md]) if md in masks else _split(val, n, rt, rng)
            for i, p in enumerate(split):
                nxt[(*key, i)] = p
        pieces = nxt
    out: dict[Coord, Array] = {}
    for c in coords(attr):
        key = tuple(c[md] for md, _ in partial)
        # np.array, not ascontiguousarray: the latter turns a 0-d block into shape (1,).
        out[c] = np.array(pieces[key][shard_slices(x.shape, attr, c)])
    return out


def gather(blocks: Mapping[Coord, Array], shape: Sequence[int], attr: DistAttr) -> Array:
    """Reassemble the global array from every coordinate's block, reducing pending partials."""
    shape = tuple(shape)
    if len(shape) != attr.ndim:
        raise ShardMismatch(f"gather: shape {list(shape)} with an attribute of rank {attr.ndim}")
    partial = attr.partial_items
    globals_: dict[Coord, Array] = {}
    filled: dict[Coord, Array] = {}
    for c in coords(attr):
        if c not in blocks:
            raise ShardMismatch(f"gather: no block for mesh coordinate {c}")
        b = np.asarray(blocks[c])
        key = tuple(c[md] for md, _ in partial)
        sl = shard_slices(shape, attr, c)
        want = tuple(s.stop - s.start for s in sl)
        if b.shape != want:
            raise ShardShapeMismatch(
                f"gather: block at {c} has shape {list(b.shape)}, expected {list(want)} "
                f"for {attr.mapping_str()} of a {list(shape)} tensor"
            )
        if key not in globals_:
            globals_[key] = np.zeros(shape, dtype=b.dtype)
            filled[key] = np.zeros(shape, dtype=bool)
        g, f = globals_[key], filled[key]
        if f[sl].any() and not same_values(g[sl], b):
            raise ShardMismatch(
                f"gather: replicas disagree at mesh coordinate {c} under {attr.mapping_str()}"
            )
        g[sl] = b
        f[sl] = True
    # Reduce the last-split partial mesh dim first, mirroring scatter.
    masks = dict(attr.mask_items)
    for level in range(len(partial) - 1, -1, -1):
        md, rt = partial[level]
        grouped: dict[Coord, list[Array]] = {}
        for key in sorted(globals_):
            grouped.setdefault(key[:level], []).append(globals_[key])
        if md in masks:
            for v in grouped.values():
                _check_masked(v, masks[md], attr.mapping_str())
        globals_ = {k: _reduce(v, rt) for k, v in grouped.items()}
    return globals_[()]


def run_local(
    kernel: Any, inputs: Sequence[tuple[Array, DistAttr]], rng: np.random.Generator | None = None
) -> dict[Coord, Any]:
    """Scatter each input by its attribute and run ``kernel(*blocks)`` at every mesh coordinate."""
    rng = rng if rng is not None else np.random.default_rng(0)
    scattered = [scatter(x, a, rng) for x, a in inputs]
    cs = coords(inputs[0][1])
    return {c: kernel(*(s[c] for s in scattered)) for c in cs}


__all__ = [
    "ShardMismatch",
    "ShardShapeMismatch",
    "balanced_range",
    "coords",
    "gather",
    "mask_owners",
    "run_local",
    "scatter",
    "shard_index",
    "shard_slices",
]
