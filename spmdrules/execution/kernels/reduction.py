"""Local kernels of the reductions: sum ... any, reduce_base, logsumexp, p_norm, mean_all (and its
gradient), argmax/argmin.

A rank reduces its own block over the reduced dims. Where the rule leaves a reduced dim sharded,
that local result is one piece of the partial the rule claims, of the op's own reduce type: local
sums add up, local maxima combine by max, and so on. A block may hold none of a reduced dim (a dim
of 3 over 4 shards): it then yields the reduce type's identity (0, -inf, +inf, 1, False, True),
which leaves the combination unchanged. Where no reduce type combines local results (logsumexp,
frobenius_norm, p_norm for p not in 0, 1, inf, the index of argmax), the rule keeps the reduced
dims whole on every rank and the local result is the global one.

squared_l2_norm follows its rule's signature here: the sum of squares over ``axis``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Final

import numpy as np

from spmdrules.core.dtypes import extremes
from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel

#: Paddle's ReduceType enum, the ``reduce_type`` attribute of reduce_base (the rule's own tuple;
#: imported by name because mypy cannot follow the rules package's install mapping).
REDUCE_BASE_TYPES: Final[tuple[str, ...]] = tuple(
    importlib.import_module("spmdrules.rules.reduction").REDUCE_BASE_TYPES
)

#: The plain ``(x, axis, keep_dim)`` reductions and what each computes.
AXIS_OPS: Final[dict[str, str]] = {
    "sum": "sum", "reduce_sum": "sum",
    "squared_l2_norm": "squared_l2_norm",
    "max": "max", "amax": "max", "reduce_max": "max",
    "min": "min", "amin": "min",
    "prod": "product",
    "all": "all", "any": "any",
    "frobenius_norm": "frobenius_norm",
}

Axes = tuple[int, ...] | None


def reduced_axes(op: str, ndim: int, axis: Sequence[int]) -> Axes:
    """Non-negative reduced axes; ``[]`` reduces every dim; a 0-d x has none (None)."""
    if ndim == 0:
        return None
    out = []
    for a in axis:
        if not -ndim <= a < ndim:
            raise RuleArgumentError(
                f"{op}: axis {a} is out of range for 'x' of rank {ndim}; use {-ndim}..{ndim - 1}"
            )
        out.append(a % ndim)
    return tuple(sorted(set(out))) if out else tuple(range(ndim))


def reduce_block(x: Array, reduce_type: str, axes: Axes, keepdims: bool) -> Array:
    """Reduce one block with a reduce type (the same that combines the blocks' results)."""
    if reduce_type == "sum":
        out = np.sum(x, axis=axes, keepdims=keepdims)
    elif reduce_type in ("max", "min"):
        fn = np.max if reduce_type == "max" else np.min
        if x.size:
            out = fn(x, axis=axes, keepdims=keepdims)
        else:  # nothing of the reduced dims here: the identity, which leaves the combine as is
            lowest, highest = extremes(x.dtype)
            out = fn(x, axis=axes, keepdims=keepdims,
                     initial=lowest if reduce_type == "max" else highest)
    elif reduce_type == "product":
        out = np.prod(x, axis=axes, keepdims=keepdims)
    elif reduce_type == "avg":
        out = np.mean(x, axis=axes, keepdims=keepdims)
    elif reduce_type == "any":
        out = np.any(x, axis=axes, keepdims=keepdims)
    elif reduce_type == "all":
        out = np.all(x, axis=axes, keepdims=keepdims)
    else:
        raise RuleArgumentError(f"unknown reduce type {reduce_type!r}; use one of {REDUCE_BASE_TYPES}")
    return np.asarray(out)


def _keep(ctx: LocalContext) -> bool:
    return bool(ctx.attrs.get("keep_dim", ctx.attrs.get("keepdims", False)))


def _axes(ctx: LocalContext, x: Array) -> Axes:
    return reduced_axes(ctx.op, x.ndim, tuple(ctx.attrs.get("axis", ())))


@register_kernel(*AXIS_OPS)
def axis_reduction_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    what, axes, keep = AXIS_OPS[ctx.op], _axes(ctx, x), _keep(ctx)
    if what == "squared_l2_norm":
        return (reduce_block(np.square(x), "sum", axes, keep),)
    if what == "frobenius_norm":
        return (np.sqrt(reduce_block(np.square(x), "sum", axes, keep)),)
    return (reduce_block(x, what, axes, keep),)


def mean_count(ctx: LocalContext) -> int:
    """How many elements of the *global* x each result element averages."""
    shape = tuple(ctx.input_shapes[0])
    axes = reduced_axes(ctx.op, len(shape), tuple(ctx.attrs.get("axis", ())))
    return int(np.prod([shape[a] for a in (range(len(shape)) if axes is None else axes)]))


@register_kernel("mean")
def mean_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """The local sum over the global count: a sharded reduced dim leaves an exact pending sum."""
    x = array(ctx, blocks, 0, "x")
    total = reduce_block(x.astype(np.float64), "sum", _axes(ctx, x), bool(ctx.attrs.get("keepdim")))
    return (total / max(mean_count(ctx), 1),)


@register_kernel("reduce_base")
def reduce_base_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = array(ctx, blocks, 0, "x")
    rt = ctx.attrs.get("reduce_type", 0)
    if not isinstance(rt, int) or not 0 <= rt < len(REDUCE_BASE_TYPES):
        raise RuleArgumentError(
            f"reduce_base: reduce_type {rt!r} is not a reduce type; use 0..6 for "
            f"{', '.join(REDUCE_BASE_TYPES)}"
        )
    return (reduce_block(x, REDUCE_BASE_TYPES[rt], _axes(ctx, x), _keep(ctx)),)


@register_kernel("logsumexp")
def logsumexp_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """log(sum(exp(x))), shifted by the maximum as Paddle does (an infinite maximum shifts by 0).
    reduce_all is not read, as in Paddle's kernel and the rule."""
    x = array(ctx, blocks, 0, "x")
    axes, keep = _axes(ctx, x), _keep(ctx)
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    if not keep and axes is not None:
        out = np.squeeze(out, axis=axes)
    return (np.asarray(out),)


def p_norm_axes(ctx: LocalContext, x: Array) -> tuple[float, Axes, bool]:
    """p_norm's order, reduced axes (every dim with ``asvector``) and keepdims."""
    axis = () if ctx.attrs.get("asvector", False) else (int(ctx.attrs.get("axis", -1)),)
    return float(ctx.attrs.get("porder", 2.0)), reduced_axes(ctx.op, x.ndim, axis), _keep(ctx)


@register_kernel("p_norm")
def p_norm_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """p=0 counts non-zeros, p=inf / -inf take the max / min of |x|, any other p is
    (sum |x|^p)^(1/p); asvector reduces every dim. epsilon only guards Paddle's gradient."""
    x = array(ctx, blocks, 0, "x")
    p, axes, keep = p_norm_axes(ctx, x)
    a = np.abs(x)
    if p == 0:
        out = np.sum(a != 0, axis=axes, keepdims=keep).astype(x.dtype)
    elif math.isinf(p):
        out = reduce_block(a, "max" if p > 0 else "min", axes, keep)
    elif p == 1:
        out = np.sum(a, axis=axes, keepdims=keep)
    else:
        out = np.sum(a**p, axis=axes, keepdims=keep) ** (1.0 / p)
    return (np.asarray(out),)


@register_kernel("mean_all")
def mean_all_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """The mean of the block: an avg partial over equal blocks (the rule keeps uneven dims whole)."""
    x = array(ctx, blocks, 0, "x")
    return (reduce_block(x, "avg", None if x.ndim == 0 else tuple(range(x.ndim)), False),)


@register_kernel("mean_all_grad")
def mean_all_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """x_grad = out_grad / numel(x) everywhere (x and x_grad are replicated by the rule)."""
    x = array(ctx, blocks, 0, "x")
    g = array(ctx, blocks, 1, "out_grad")
    if g.size != 1:
        raise RuleArgumentError(
            f"mean_all_grad: 'out_grad' must hold the one scalar gradient, got a block of shape "
            f"{list(g.shape)}"
        )
    n = math.prod(ctx.input_shapes[0])
    return (np.full(x.shape, g.reshape(()) / n, dtype=np.result_type(x, g)),)


@register_kernel("argmax", "argmin")
def arg_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """The int64 index of the first extreme entry along ``axis`` (or of flattened x). An index is
    local to its block, so the axis (with flatten: every dim) must be whole on this rank."""
    x = array(ctx, blocks, 0, "x")
    fn = np.argmax if ctx.op == "argmax" else np.argmin
    keep = bool(ctx.attrs.get("keepdims", False))
    mdm = ctx.input_attrs[0].multi_dims_mapping if ctx.input_attrs else ()
    if ctx.attrs.get("flatten", False) or x.ndim == 0:
        _check_whole(ctx, mdm, range(len(mdm)))
        out = fn(x, keepdims=keep) if x.ndim else fn(x)
        return (np.asarray(out, dtype=np.int64),)
    axis = int(ctx.attrs.get("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise RuleArgumentError(
            f"{ctx.op}: axis {axis} is out of range for 'x' of rank {x.ndim}; use "
            f"{-x.ndim}..{x.ndim - 1}"
        )
    axis %= x.ndim
    _check_whole(ctx, mdm, (axis,))
    return (np.asarray(fn(x, axis=axis, keepdims=keep), dtype=np.int64),)


def _check_whole(ctx: LocalContext, mdm: Sequence[Sequence[int]], dims: Sequence[int]) -> None:
    for d in dims:
        if d < len(mdm) and mdm[d]:
            raise UnsupportedError(
                f"{ctx.op}: 'x' dim {d} is sharded on mesh dims {list(mdm[d])}, but an index "
                "along it computed on a block is local to that block; replicate the dim (the "
                "rule's inferred input attribute does)"
            )


__all__ = ["AXIS_OPS", "REDUCE_BASE_TYPES", "p_norm_axes", "reduce_block", "reduced_axes"]
