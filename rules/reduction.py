"""Reductions: sum, max, min, prod, all, any, norms, logsumexp, mean_all, argmax/argmin.

One description serves the family: a reduction is the notation ``abcd->ac`` (kept letters) or
``abcd->a1c1`` with ``keep_dim``, plus the reduce type that combines the per-shard results of a
sharded reduced letter. Forward keeps the kept letters' shardings and turns the reduced letters'
mesh dims into a pending partial of that type; reverse reads x's kept letters off the output,
replicates the reduced ones, and returns the output that this x produces.

Where Paddle differs (see docs/deviations/reduction.md): Paddle reports every reduction's pending
partial as *sum*. We report the type the op needs (max, min, product, any, all), and where no
reduce type combines the local results (frobenius_norm, logsumexp, p_norm with p not in 0, 1, inf,
the mean of unequal blocks) we replicate the sharded reduced dims of x instead of leaving a
partial. Paddle's reverse echoes the given output (partial, sharded size-1 dims) although its x
cannot produce it; ours returns the output x produces.

A sum (and a mean, a sum divided by a constant) is linear: a pending sum of x passes through it,
each device summing its piece, and is reduced where a consumer needs the result whole, on the
smaller reduced tensor. Paddle reduces x first (docs/deviations/reduction.md,
``reduce-sum-keeps-partial``); the other reductions (max, norms, ...) are not linear in x.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Final

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, replicated_like

#: The reduce type that combines per-shard results; None: none does (replicate the reduced dims).
Combine = str | None

#: Ops of the plain ReductionInferSpmd signature ``(x, axis, keep_dim)`` and their combine.
AXIS_OPS: Final[dict[str, Combine]] = {
    "sum": "sum", "reduce_sum": "sum",
    "squared_l2_norm": "sum",  # a sum of squares: local sums of squares add up exactly
    "max": "max", "amax": "max", "reduce_max": "max",
    "min": "min", "amin": "min",
    "prod": "product",
    "all": "all", "any": "any",
    "frobenius_norm": None,  # sqrt(sum x^2): local norms do not combine by any reduce type
}

#: The reductions that are linear in x: a pending sum of x stays pending through them.
LINEAR: Final = frozenset({"sum", "reduce_sum", "mean"})

#: Ops with no combine whose result on an empty block is that reduce type's identity: over a
#: sharded size-1 dim only one block is not empty, so their local results still add up exactly.
DEGENERATE: Final[dict[str, Combine]] = {"frobenius_norm": "sum"}

#: Paddle's ReduceType enum, the ``reduce_type`` attribute of reduce_base.
REDUCE_BASE_TYPES: Final = ("sum", "max", "min", "product", "avg", "any", "all")


Shape = tuple[int, ...]


# ---- the notation: which dims of x are reduced ---------------------------------------------------
@functools.lru_cache(maxsize=1024)
def reduced_dims(nd: int, axis: tuple[int, ...]) -> tuple[bool, ...]:
    """Per dim of a rank-``nd`` x: is it reduced? ``axis=()`` reduces every dim; negative axes
    count from the end."""
    if not axis:
        return (True,) * nd
    mask = [False] * nd
    for a in axis:
        # A 0-d tensor accepts axis 0 / -1, as Paddle's reduce ops do.
        lo, hi = (-1, 1) if nd == 0 else (-nd, nd)
        if not lo <= a < hi:
            raise RuleArgumentError(
                f"axis {a} is out of range for 'x' of rank {nd}; use {lo}..{hi - 1}"
            )
        if nd == 0:
            continue
        i = a + nd if a < 0 else a
        if mask[i]:
            raise RuleArgumentError(
                f"axis {list(axis)} names dim {i} of 'x' twice; list each reduced dim once"
            )
        mask[i] = True
    return tuple(mask)


def reduction(x: Shape, reduced: tuple[bool, ...], keep_dim: bool, combine: Combine,
              degenerate: Combine = None, linear: bool = False) -> Description:
    """``abcd->ac`` (``a1c1`` with ``keep_dim``): a sharded reduced letter leaves a pending
    ``combine`` of the blocks' results. Without a combine it is whole, but where a
    ``degenerate`` one holds (a size-1 dim: one block has the element, the others are empty).
    A mean of means is the mean only over equal blocks: an "avg" letter must divide evenly. A
    ``linear`` reduction passes x's pending sums in both directions."""
    ls = letters(len(x))
    out = "".join("1" if r else ch for ch, r in zip(ls, reduced, strict=True) if keep_dim or not r)
    red = [(ch, n) for ch, n, r in zip(ls, x, reduced, strict=True) if r]
    pending = combine
    whole: frozenset[str] = frozenset()
    if combine is None:
        pending = degenerate
        whole = frozenset(ch for ch, n in red if degenerate is None or n != 1)
    policy = Policy(reverse_linear=linear,
                    even=frozenset(ch for ch, _ in red) if combine == "avg" else frozenset())
    return Description((ls,), (out,), whole=whole, pending=pending,
                       linear=(0,) if linear else (), policy=policy)


def _check_out(x: Shape, out: Shape, reduced: tuple[bool, ...], keep_dim: bool) -> None:
    """The reverse rule answers the output that x produces: ``out`` must have its shape."""
    want = tuple(1 if r else n for n, r in zip(x, reduced, strict=True) if keep_dim or not r)
    if out != want:
        raise RuleArgumentError(
            f"'out' has shape {list(out)} but reducing 'x' of shape {list(x)} over "
            f"dims {[i for i, r in enumerate(reduced) if r]} (keep_dim={keep_dim}) gives "
            f"{list(want)}"
        )


# ---- the ops' signatures -------------------------------------------------------------------------
def axis_reduction(op: str, x: Shape, axis: tuple[int, ...], keep_dim: bool) -> Description:
    """The description of an op of ``AXIS_OPS`` (or ``mean``) on x."""
    combine = AXIS_OPS["sum" if op == "mean" else op]
    return reduction(x, reduced_dims(len(x), axis), keep_dim, combine, DEGENERATE.get(op),
                     op in LINEAR)


def _axis_rule(op: str) -> tuple[Callable[..., Description], Callable[..., None]]:
    def describe(x: Shape, *, axis: tuple[int, ...], keep_dim: bool) -> Description:
        return axis_reduction(op, x, axis, keep_dim)

    def check(x: Shape, out: Shape, axis: tuple[int, ...], keep_dim: bool) -> None:
        _check_out(x, out, reduced_dims(len(x), axis), keep_dim)

    return describe, check


def reduce_base(x: Shape, *, axis: tuple[int, ...], keep_dim: bool, reduce_type: int
                ) -> Description:
    if not 0 <= reduce_type < len(REDUCE_BASE_TYPES):
        raise RuleArgumentError(
            f"reduce_type {reduce_type} is not a reduce type; use 0..{len(REDUCE_BASE_TYPES) - 1} "
            f"for {', '.join(REDUCE_BASE_TYPES)}"
        )
    return reduction(x, reduced_dims(len(x), axis), keep_dim, REDUCE_BASE_TYPES[reduce_type])


def logsumexp(x: Shape, *, axis: tuple[int, ...], keepdims: bool) -> Description:
    # reduce_all is not read: Paddle's kernel reduces over ``axis`` whatever its value.
    return reduction(x, reduced_dims(len(x), axis), keepdims, None)


def _check_logsumexp(x: Shape, out: Shape, axis: tuple[int, ...], keepdims: bool, _: bool
                     ) -> None:
    _check_out(x, out, reduced_dims(len(x), axis), keepdims)


def p_norm_combine(porder: float) -> Combine:
    """p=0 counts non-zeros and p=1 sums |x|: both add up; p=inf is a max, p=-inf a min of |x|.
    Any other p takes a root of the sum, which no reduce type undoes."""
    if porder in (0.0, 1.0):
        return "sum"
    if math.isinf(porder):
        return "max" if porder > 0 else "min"
    return None


def _p_norm_dims(x: Shape, axis: int, asvector: bool) -> tuple[bool, ...]:
    return reduced_dims(len(x), () if asvector else (axis,))


def p_norm(x: Shape, *, porder: float, axis: int, keepdims: bool, asvector: bool) -> Description:
    combine = p_norm_combine(porder)
    # a p-norm (p > 0) of an empty block is 0: over sharded size-1 dims it adds up exactly
    return reduction(x, _p_norm_dims(x, axis, asvector), keepdims, combine,
                     "sum" if combine is None and porder > 0 else None)


def _check_p_norm(x: Shape, out: Shape, porder: float, axis: int, epsilon: float,
                  keepdims: bool, asvector: bool) -> None:
    _check_out(x, out, _p_norm_dims(x, axis, asvector), keepdims)


def mean_all(x: Shape) -> Description:
    return reduction(x, (True,) * len(x), False, "avg")


def mean_all_grad(x: TensorSpec, out_grad: TensorSpec) -> SpmdInfo:
    """MeanAllGradInferSpmd: x and x_grad replicated, out_grad without its partial."""
    if out_grad.shape not in ((), (1,)):
        raise RuleArgumentError(
            f"'out_grad' has shape {list(out_grad.shape)}; the mean of all entries is a scalar "
            "of shape [] (or [1])"
        )
    rep = replicated_like(x)
    return SpmdInfo([rep, out_grad.attr.without_partial()], [rep])


# ---- argmax / argmin: the index along a sharded axis cannot be combined: replicate that axis -----
def _arg_axis(x: TensorSpec, axis: int) -> int:
    nd = len(x.shape)
    lo, hi = (-1, 1) if nd == 0 else (-nd, nd)
    if not lo <= axis < hi:
        raise RuleArgumentError(f"axis {axis} is out of range for 'x' of rank {nd}; use {lo}..{hi - 1}")
    return axis + nd if axis < 0 else axis


def arg_forward(x: TensorSpec, axis: int, keepdims: bool, flatten: bool) -> SpmdInfo:
    nd = len(x.shape)
    if flatten:
        # The index into the flattened x is a 0-d tensor (Paddle's rule says rank 1).
        return SpmdInfo([replicated_like(x)], [attr(x, ((),) * nd if keepdims else ())])
    if nd == 0:
        _arg_axis(x, axis)
        return SpmdInfo([replicated_like(x)], [replicated_like(x)])
    i = _arg_axis(x, axis)
    mdm = x.attr.multi_dims_mapping
    x_m = (*mdm[:i], (), *mdm[i + 1 :])
    out_m = x_m if keepdims else (*mdm[:i], *mdm[i + 1 :])
    return SpmdInfo([attr(x, x_m)], [attr(x, out_m)])


def arg_reverse(
    x: TensorSpec, out: TensorSpec, axis: int, keepdims: bool, flatten: bool
) -> SpmdInfo:
    """x follows out except along the axis, which is whole (replicated) in x and in out."""
    nd = len(x.shape)
    out_mdm = out.attr.multi_dims_mapping
    if flatten:
        ok = (nd,) if keepdims else (0, 1)  # rank 1: the [1]-shaped index of older Paddle
        if len(out_mdm) not in ok:
            raise RuleArgumentError(
                f"'out' has rank {len(out_mdm)} but the index into the flattened 'x' has rank "
                f"{ok[0]} (keepdims={keepdims}); pass an 'out' of that rank"
            )
        return SpmdInfo([replicated_like(x)], [replicated_like(out)])
    i = _arg_axis(x, axis)
    want = x.shape if nd == 0 else (
        (*x.shape[:i], 1, *x.shape[i + 1 :]) if keepdims else (*x.shape[:i], *x.shape[i + 1 :]))
    if out.shape != want:
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but the index of 'x' (shape {list(x.shape)}) along "
            f"axis {axis} with keepdims={keepdims} has shape {list(want)}"
        )
    if nd == 0:
        return SpmdInfo([replicated_like(x)], [replicated_like(out)])
    if keepdims:
        out_m = (*out_mdm[:i], (), *out_mdm[i + 1 :])
        return SpmdInfo([attr(x, out_m)], [attr(out, out_m)])
    return SpmdInfo([attr(x, (*out_mdm[:i], (), *out_mdm[i:]))], [attr(out, out_mdm)])


# ---- registration ---------------------------------------------------------------------------------
_AXIS_ATTRS = [A("axis", "ints", ()), A("keep_dim", "bool", False)]
_X = [T("x")]
_OUT = [T("out")]

for _name, _combine in AXIS_OPS.items():
    _describe, _check = _axis_rule(_name)
    register_described(
        _name, _describe, inputs=_X, outputs=_OUT, attrs=_AXIS_ATTRS, check_reverse=_check,
        key=None if _name in DEGENERATE else ranks,
        doc=f"ReductionInferSpmd; sharded reduced dims leave a {_combine or 'no'} partial.")

register_described(
    "reduce_base", reduce_base, inputs=_X, outputs=_OUT,
    attrs=[*_AXIS_ATTRS, A("reduce_type", "int", 0)], reverse_attrs=_AXIS_ATTRS,
    check_reverse=_axis_rule("reduce_base")[1], key=ranks,
    doc="ReductionInferSpmdBase: reduce_type 0..6 = sum, max, min, product, avg, any, all.")
register_described(
    "logsumexp", logsumexp, inputs=_X, outputs=_OUT,
    attrs=[A("axis", "ints", ()), A("keepdims", "bool", False), A("reduce_all", "bool", False)],
    check_reverse=_check_logsumexp, key=ranks,
    doc="LogSumExpInferSpmd; sharded reduced dims are replicated.")
register_described(
    "p_norm", p_norm, inputs=_X, outputs=_OUT,
    attrs=[A("porder", "float", 2.0), A("axis", "int", -1), A("epsilon", "float", 1e-12),
           A("keepdims", "bool", False), A("asvector", "bool", False)],
    check_reverse=_check_p_norm,
    doc="PNormInferSpmd; the partial type depends on porder.")
# mean (no Paddle rule): the kernel divides its local sum by the *global* count, so a sharded
# reduced dim leaves an exact pending sum, uneven blocks included (an avg of uneven blocks is not).
_mean, _mean_check = _axis_rule("mean")
register_described(
    "mean", lambda x, *, axis, keepdim: _mean(x, axis=axis, keep_dim=keepdim), inputs=_X,
    outputs=_OUT, attrs=[A("axis", "ints", ()), A("keepdim", "bool", False)],
    check_reverse=_mean_check, key=ranks,
    doc="x averaged over `axis` (every dim when empty): sharded reduced dims leave a pending sum.")
register_described("mean_all", mean_all, inputs=_X, outputs=_OUT, reverse=False, key=ranks,
                   doc="MeanAllInferSpmd: an avg partial over the mesh dims of x.")
register_rule("mean_all_grad", forward=mean_all_grad, inputs=[T("x"), T("out_grad")],
              outputs=[T("x_grad")], doc="MeanAllGradInferSpmd.")
for _name in ("argmax", "argmin"):
    register_rule(_name, forward=arg_forward, reverse=arg_reverse, inputs=_X, outputs=_OUT,
                  attrs=[A("axis", "int", -1), A("keepdims", "bool", False),
                         A("flatten", "bool", False)],
                  doc="ArgMax/ArgMinInferSpmdBase: the axis is replicated.")

__all__ = ["AXIS_OPS", "LINEAR", "REDUCE_BASE_TYPES", "axis_reduction", "p_norm_combine",
           "reduced_dims", "reduction"]
