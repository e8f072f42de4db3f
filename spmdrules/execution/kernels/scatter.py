"""Local kernels of scatter, scatter_nd_add, put_along_axis, index_put and the gradients of the
last two.

Each op writes values into x: a value's positions along x's *indexed* dims come from an index
operand, and along every other (*passing*) dim its coordinate is x's own. The rules keep the
indexed dims and the positions whole, so a rank writes, into the block of x it holds, the values
whose passing coordinates fall in that block; it must hold them (``ShardMismatch`` otherwise).
Positions outside x raise ``KernelInputError``.

On a block, every op of the family is ``write(x, lin, values, reduce, include_self)``: ``lin``
holds, for each element of the (broadcast) values, the flat position in x it lands on. Repeated
positions keep the last write of an assignment (numpy's order, which ``last_writers`` reads back
from the same assignment, so the forward and its derivative agree) and combine all writes of a
reduction. ``include_self=False`` leaves x's own value out of the written positions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import ShardMismatch
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.kernels.gather import in_range
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    arrays,
    register_kernel,
)

# ---- the arithmetic on one block -----------------------------------------------------------------
REDUCES = ("assign", "add", "mul", "multiply", "mean", "amin", "amax")
_IDENTITY = {"add": 0.0, "mean": 0.0, "mul": 1.0, "multiply": 1.0, "amin": np.inf, "amax": -np.inf}


def written(lin: Array, size: int) -> Array:
    """A flat mask of the positions some value lands on."""
    mask = np.zeros(size, dtype=bool)
    mask[lin.ravel()] = True
    return mask


def last_writers(lin: Array) -> Array:
    """Per value, whether an assignment keeps it (no later value lands on its position)."""
    flat = lin.ravel()
    order = np.arange(flat.size)
    winner = np.full(int(flat.max()) + 1 if flat.size else 0, -1)
    winner[flat] = order
    kept: Array = (winner[flat] == order).reshape(lin.shape)
    return kept


def counts(lin: Array, size: int) -> Array:
    return np.bincount(lin.ravel(), minlength=size).astype(np.float64)


def write(x: Array, lin: Array, values: Array, reduce: str, include_self: bool) -> Array:
    """x with the values written at the flat positions ``lin`` (values broadcast to lin)."""
    v = np.broadcast_to(values, lin.shape).ravel()
    out = x.astype(np.result_type(x, values), copy=True).reshape(-1)
    at = lin.ravel()
    if reduce == "assign":
        out[at] = v
        return out.reshape(x.shape)
    if not include_self:
        out[at] = _IDENTITY[reduce]
    if reduce in ("add", "mean"):
        np.add.at(out, at, v)
        if reduce == "mean":
            n = counts(at, out.size) + (1.0 if include_self else 0.0)
            out = np.where(written(at, out.size), out / np.maximum(n, 1.0), out)
    elif reduce in ("mul", "multiply"):
        np.multiply.at(out, at, v)
    else:
        (np.minimum if reduce == "amin" else np.maximum).at(out, at, v)
    return out.reshape(x.shape)


def write_vjp(x: Array, lin: Array, values: Array, g: Array, reduce: str, include_self: bool
              ) -> tuple[Array, Array]:
    """The cotangents of x and of the broadcast values (shaped like ``lin``) given the
    cotangent ``g`` of ``write``'s result."""
    at = lin.ravel()
    v = np.broadcast_to(values, lin.shape).ravel().astype(np.result_type(values, g))
    gf = g.reshape(-1)
    hit = written(at, gf.size)
    dx = gf.copy()
    if reduce == "assign":
        dv = np.where(last_writers(at), gf[at], 0.0)
        dx[hit] = 0.0
    elif reduce == "add":
        dv = gf[at]
        if not include_self:
            dx[hit] = 0.0
    elif reduce == "mean":
        n = np.maximum(counts(at, gf.size) + (1.0 if include_self else 0.0), 1.0)
        dv = gf[at] / n[at]
        dx[hit] = gf[hit] / n[hit] if include_self else 0.0
    elif reduce in ("mul", "multiply"):
        dv, rest = _products_of_others(x.reshape(-1), at, v, include_self)
        dv = gf[at] * dv
        dx[hit] = gf[hit] * rest[hit] if include_self else 0.0
    else:
        out = write(x, lin, values, reduce, include_self).reshape(-1)
        ties_v = v == out[at]
        ties_x = hit & (x.reshape(-1) == out) if include_self else np.zeros_like(hit)
        n = np.bincount(at[ties_v], minlength=gf.size) + ties_x
        share = gf / np.maximum(n, 1)
        dv = np.where(ties_v, share[at], 0.0)
        dx[hit] = np.where(ties_x[hit], share[hit], 0.0)
    return dx.reshape(g.shape), dv.reshape(lin.shape)


def _products_of_others(x: Array, at: Array, v: Array, include_self: bool) -> tuple[Array, Array]:
    """Per value, the product of everything else its position multiplies (x's own value when
    included, and the other values landing there); per position, the product of its values.
    Computed without division, so zeros are exact."""
    others = np.ones_like(v)
    rest = np.ones(x.size, dtype=v.dtype)
    if not at.size:
        return others, rest
    order = np.argsort(at, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(at[order]) != 0])
    for s, e in zip(starts, np.r_[starts[1:], at.size], strict=True):
        group = order[s:e]
        vals = v[group]
        before = np.r_[1.0, np.cumprod(vals)[:-1]]
        after = np.r_[np.cumprod(vals[::-1])[:-1][::-1], 1.0]
        base = x[at[group[0]]] if include_self else 1.0
        others[group] = base * before * after
        rest[at[group[0]]] = np.prod(vals)
    return others, rest


Shape = tuple[int, ...]
Spec = tuple[Shape, DistAttr]
#: (ctx, x block shape, index blocks, values block shape) -> flat positions, shaped like the values
Positions = Callable[[LocalContext, Shape, Sequence[Array], Shape], Array]


@dataclass(frozen=True)
class Layout:
    """How one op of the family writes: its passing (value dim, x dim) pairs, those of its index
    (put_along_axis only), x's indexed dims, the reduction, and the positions."""

    value_pairs: tuple[tuple[int, int], ...]
    index_pairs: tuple[tuple[int, int], ...]
    indexed: tuple[int, ...]
    reduce: str
    include_self: bool
    positions: Positions


def rows(ctx: LocalContext, t: Array, spec: Spec, name: str, pairs: Sequence[tuple[int, int]],
         coords: Sequence[range]) -> Array:
    """The part of block ``t`` (of a tensor laid out as ``spec``) that lands on x's ``coords``:
    along each paired dim the coordinates it shares with x (those below its size), along every
    other dim all of it."""
    shape, attr = spec
    to_x = dict(pairs)
    pos: list[Any] = []
    for s, n in enumerate(shape):
        want = [r for r in coords[to_x[s]] if r < n] if s in to_x else range(n)
        pos.append(local.held(ctx, local.block_range(ctx, shape, attr, s), want, name, s))
    return local.take(t, pos)


def coords_of(ctx: LocalContext, spec: Spec, name: str, indexed: Sequence[int]) -> list[range]:
    """The global coordinates of a block of x's shape, which must hold the indexed dims whole."""
    shape, attr = spec
    out = [local.block_range(ctx, shape, attr, d) for d in range(len(shape))]
    for d in indexed:
        if out[d] != range(shape[d]):
            raise ShardMismatch(
                f"{ctx.op}: {name!r} dim {d} is sharded under {attr.mapping_str()}, but a position "
                f"may name any of its rows; replicate {name!r} dim {d}")
    return out


def _identity(n: int) -> tuple[tuple[int, int], ...]:
    return tuple((d, d) for d in range(n))


def _index_blocks(ctx: LocalContext, blocks: Sequence[LocalValue], lay: Layout, coords: Sequence[range]
                  ) -> list[Array]:
    if ctx.op.startswith("index_put"):
        specs = zip(ctx.input_shapes[1], ctx.input_attrs[1], strict=True)
        return [rows(ctx, t, (tuple(s), a), f"indices[{i}]", (), coords)
                for i, (t, (s, a)) in enumerate(zip(arrays(ctx, blocks, 1, "indices"), specs,
                                                    strict=True))]
    spec = local.input_spec(ctx, 1, "index")
    return [rows(ctx, array(ctx, blocks, 1, "index"), spec, "index", lay.index_pairs, coords)]


def _value_name(ctx: LocalContext) -> str:
    return "updates" if ctx.op.startswith("scatter") else "value"


def _pieces(ctx: LocalContext, blocks: Sequence[LocalValue], lay: Layout, x: Array, g: Array | None,
            g_spec: Spec | None, coords: Sequence[range]) -> tuple[Array, Array, Array, Array | None]:
    """x, the flat positions, the values and the cotangent on the x coordinates ``coords``."""
    x_spec = local.input_spec(ctx, 0, "x")
    ident = _identity(len(x_spec[0]))
    xs = rows(ctx, x, x_spec, "x", ident, coords)
    idx = _index_blocks(ctx, blocks, lay, coords)
    name = _value_name(ctx)
    v = rows(ctx, array(ctx, blocks, 2, name), local.input_spec(ctx, 2, name), name,
             lay.value_pairs, coords)
    gs = None if g is None or g_spec is None else rows(ctx, g, g_spec, "out_grad", ident, coords)
    return xs, lay.positions(ctx, xs.shape, idx, v.shape), v, gs


def forward(ctx: LocalContext, blocks: Sequence[LocalValue], lay: Layout) -> Array:
    x = array(ctx, blocks, 0, "x")
    local.require_whole(ctx, 0, "x")
    coords = coords_of(ctx, local.output(ctx), "out", lay.indexed)
    xs, lin, v, _ = _pieces(ctx, blocks, lay, x, None, None, coords)
    return write(xs, lin, v, lay.reduce, lay.include_self)


def gradients(ctx: LocalContext, blocks: Sequence[LocalValue], lay: Layout, g: Array, g_spec: Spec,
              dx_spec: Spec, dv_spec: Spec) -> tuple[Array, Array]:
    """The cotangents of x (on the block ``dx_spec`` lays out) and of the values (on the block
    ``dv_spec`` lays out): each from the values landing on the x coordinates it needs."""
    x = array(ctx, blocks, 0, "x")
    xs, lin, v, gs = _pieces(ctx, blocks, lay, x, g, g_spec,
                             coords_of(ctx, dx_spec, "x_grad", lay.indexed))
    assert gs is not None
    dx = write_vjp(xs, lin, v, gs, lay.reduce, lay.include_self)[0]
    shape, attr = dv_spec
    to_x = {s: o for s, o in lay.value_pairs}
    full = local.input_spec(ctx, 0, "x")[0]
    v_coords = [range(n) for n in full]
    for s, o in to_x.items():
        v_coords[o] = local.block_range(ctx, shape, attr, s)
    xs, lin, v, gs = _pieces(ctx, blocks, lay, x, g, g_spec, v_coords)
    assert gs is not None
    dv = write_vjp(xs, lin, v, gs, lay.reduce, lay.include_self)[1]
    return dx, _sum_to(dv, v.shape)


def _sum_to(t: Array, shape: Shape) -> Array:
    """A broadcast value's cotangent summed back to its shape."""
    lead = t.ndim - len(shape)
    t = t.sum(axis=tuple(range(lead))) if lead else t
    keep = tuple(d for d, n in enumerate(shape) if n == 1 and t.shape[d] != 1)
    return t.sum(axis=keep, keepdims=True) if keep else t


# ---- the layouts of the family ------------------------------------------------------------------
def _scatter_positions(ctx: LocalContext, x: Shape, idx: Sequence[Array], v: Shape) -> Array:
    [i] = idx
    in_range(ctx, i, x[0])
    grid = [i.reshape((-1,) + (1,) * (len(v) - 1)),
            *np.indices(v[1:], sparse=True)] if len(v) > 1 else [i]
    return np.ravel_multi_index(np.broadcast_arrays(*grid), x)


def _nd_positions(ctx: LocalContext, x: Shape, idx: Sequence[Array], v: Shape) -> Array:
    [i] = idx
    k, b = i.shape[-1], i.ndim - 1
    for j in range(k):
        in_range(ctx, i[..., j], x[j])
    tail = len(x) - k
    grid = [i[..., j].reshape(i.shape[:-1] + (1,) * tail) for j in range(k)]
    grid += [a.reshape((1,) * b + a.shape) for a in np.indices(x[k:], sparse=True)] if tail else []
    return np.ravel_multi_index(np.broadcast_arrays(*grid), x).reshape(v)


def _along_positions(ax: int) -> Positions:
    def positions(ctx: LocalContext, x: Shape, idx: Sequence[Array], v: Shape) -> Array:
        [i] = idx
        in_range(ctx, i, x[ax])
        grid: list[Any] = list(np.indices(i.shape, sparse=True))
        grid[ax] = i
        return np.ravel_multi_index(np.broadcast_arrays(*grid), x)
    return positions


def _index_put_positions(ctx: LocalContext, x: Shape, idx: Sequence[Array], v: Shape) -> Array:
    k = len(idx)
    for j, i in enumerate(idx):
        in_range(ctx, i, x[j], f"indices[{j}]")
    tail = len(x) - k
    grid = [i.reshape((-1,) + (1,) * tail) for i in idx]
    grid += [a[None] for a in np.indices(x[k:], sparse=True)] if tail else []
    return np.ravel_multi_index(np.broadcast_arrays(*grid), x)


def layout(ctx: LocalContext) -> Layout:
    """The layout of the context's op (a gradient: of its forward op)."""
    x = local.input_spec(ctx, 0, "x")[0]
    attrs, op = ctx.attrs, ctx.op.removesuffix("_grad")
    if op == "scatter":
        add = not attrs.get("overwrite", True)  # Paddle zeroes the indexed rows, then adds
        return Layout(tuple((j, j) for j in range(1, len(x))), (), (0,),
                      "add" if add else "assign", not add, _scatter_positions)
    if op == "scatter_nd_add":
        ishape = local.input_spec(ctx, 1, "index")[0]
        k, b = ishape[-1], len(ishape) - 1
        return Layout(tuple((b + j, k + j) for j in range(len(x) - k)), (), tuple(range(k)),
                      "add", True, _nd_positions)
    if op == "put_along_axis":
        ax = normalise_axis(ctx.op, "x", int(attrs.get("axis", 0)), len(x))
        pairs = tuple((d, d) for d in range(len(x)) if d != ax)
        return Layout(pairs, pairs, (ax,), str(attrs.get("reduce", "assign")),
                      bool(attrs.get("include_self", True)), _along_positions(ax))
    k = len(ctx.input_shapes[1])
    value = local.input_spec(ctx, 2, "value")[0]
    n_rows = 1 + len(x) - k
    off = n_rows - len(value)
    pairs = tuple((s, k + off + s - 1) for s, n in enumerate(value)
                  if off + s >= 1 and n == x[k + off + s - 1])
    return Layout(pairs, (), tuple(range(k)), "add" if attrs.get("accumulate", False) else
                  "assign", True, _index_put_positions)


@register_kernel("scatter", "scatter_nd_add", "put_along_axis", "index_put")
def scatter_family(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return (forward(ctx, blocks, layout(ctx)),)


@register_kernel("put_along_axis_grad", "index_put_grad")
def scatter_family_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """(x, index, value[, out], out_grad) -> (x_grad, value_grad)."""
    gi = len(blocks) - 1
    return gradients(ctx, blocks, layout(ctx), array(ctx, blocks, gi, "out_grad"),
                     local.input_spec(ctx, gi, "out_grad"), local.output(ctx, 0),
                     local.output(ctx, 1))


__all__ = ["REDUCES", "Layout", "coords_of", "forward", "gradients", "last_writers", "layout", "rows",
           "scatter_family", "scatter_family_grad", "write", "write_vjp", "written"]
