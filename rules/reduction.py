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
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Final

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.deviations import register_deviation
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, replicated_like, shard_product

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

#: Paddle's ReduceType enum, the ``reduce_type`` attribute of reduce_base.
REDUCE_BASE_TYPES: Final = ("sum", "max", "min", "product", "avg", "any", "all")


# ---- the notation: which dims of x are reduced ---------------------------------------------------
def _reduced_mask(x: TensorSpec, axis: tuple[int, ...]) -> tuple[bool, ...]:
    """Per dim of x: is it reduced? ``axis=[]`` reduces every dim; negative axes count from the end."""
    return _mask(len(x.shape), axis)


@functools.lru_cache(maxsize=1024)
def _mask(nd: int, axis: tuple[int, ...]) -> tuple[bool, ...]:
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


def _stays_partial(combine: Combine, n: int, dims: tuple[int, ...], mesh_shape: Sequence[int]) -> bool:
    """Can a reduced dim of size ``n`` sharded on ``dims`` stay sharded, leaving a partial?"""
    if combine is None:
        return False
    # A mean of means is the mean only when every block has the same number of entries.
    return combine != "avg" or n % shard_product(mesh_shape, dims) == 0


# ---- forward and reverse, derived from the notation ----------------------------------------------
def reduce_forward(
    x: TensorSpec, reduced: tuple[bool, ...], keep_dim: bool, combine: Combine
) -> SpmdInfo:
    """x keeps its shardings (partial inputs are resharded to replicated first); the output keeps
    the kept dims' and is partial, with ``combine``, on the reduced dims' mesh dims."""
    a = x.attr
    mdm = a.multi_dims_mapping
    x_m = mdm
    out_m: list[tuple[int, ...]] = []
    pending: list[int] = []
    for i, (dims, r) in enumerate(zip(mdm, reduced, strict=True)):
        if not r:
            out_m.append(dims)
        else:
            if keep_dim:
                out_m.append(())
            if dims:
                if _stays_partial(combine, x.shape[i], dims, a.mesh.shape):
                    pending += dims
                else:
                    x_m = (*x_m[:i], (), *x_m[i + 1 :])
    partial: PartialItems = ()
    if pending and combine is not None:
        pending.sort()
        partial = tuple([(d, combine) for d in pending])
    x_attr = a if x_m is mdm and not a.partial_items else attr(a, x_m)
    return SpmdInfo((x_attr,), (attr(a, tuple(out_m), partial),))


def reduce_reverse(
    x: TensorSpec, out: TensorSpec, reduced: tuple[bool, ...], keep_dim: bool
) -> SpmdInfo:
    """x takes the output's kept dims' shardings; its reduced dims are replicated. The output is
    what that x produces: its size-1 reduced dims replicated and no partial (Paddle echoes ``out``)."""
    _check_out_shape(x, out, reduced, keep_dim)
    out_mdm = out.attr.multi_dims_mapping
    x_m: list[tuple[int, ...]] = []
    out_m: list[tuple[int, ...]] = []
    j = 0
    for r in reduced:
        if not r:
            x_m.append(out_mdm[j])
            out_m.append(out_mdm[j])
            j += 1
            continue
        x_m.append(())
        if keep_dim:
            out_m.append(())
            j += 1
    return SpmdInfo([attr(x, tuple(x_m))], [attr(out, tuple(out_m))])


def _check_out_shape(
    x: TensorSpec, out: TensorSpec, reduced: tuple[bool, ...], keep_dim: bool
) -> None:
    want = tuple(
        1 if r else n for n, r in zip(x.shape, reduced, strict=True) if keep_dim or not r
    )
    if out.shape != want:
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but reducing 'x' of shape {list(x.shape)} over "
            f"dims {[i for i, r in enumerate(reduced) if r]} (keep_dim={keep_dim}) gives "
            f"{list(want)}"
        )


# ---- the ops' signatures -------------------------------------------------------------------------
def _axis_rule(combine: Combine) -> tuple[Any, Any]:
    def forward(x: TensorSpec, axis: tuple[int, ...], keep_dim: bool) -> SpmdInfo:
        return reduce_forward(x, _reduced_mask(x, axis), keep_dim, combine)

    return forward, reverse_axis


def reverse_axis(x: TensorSpec, out: TensorSpec, axis: tuple[int, ...], keep_dim: bool) -> SpmdInfo:
    return reduce_reverse(x, out, _reduced_mask(x, axis), keep_dim)


def reduce_base_forward(
    x: TensorSpec, axis: tuple[int, ...], keep_dim: bool, reduce_type: int
) -> SpmdInfo:
    if not 0 <= reduce_type < len(REDUCE_BASE_TYPES):
        raise RuleArgumentError(
            f"reduce_type {reduce_type} is not a reduce type; use 0..{len(REDUCE_BASE_TYPES) - 1} "
            f"for {', '.join(REDUCE_BASE_TYPES)}"
        )
    return reduce_forward(x, _reduced_mask(x, axis), keep_dim, REDUCE_BASE_TYPES[reduce_type])


def logsumexp_forward(
    x: TensorSpec, axis: tuple[int, ...], keepdims: bool, reduce_all: bool
) -> SpmdInfo:
    # reduce_all is not read: Paddle's kernel reduces over ``axis`` whatever its value.
    return reduce_forward(x, _reduced_mask(x, axis), keepdims, None)


def logsumexp_reverse(
    x: TensorSpec, out: TensorSpec, axis: tuple[int, ...], keepdims: bool, reduce_all: bool
) -> SpmdInfo:
    return reduce_reverse(x, out, _reduced_mask(x, axis), keepdims)


def p_norm_combine(porder: float) -> Combine:
    """p=0 counts non-zeros and p=1 sums |x|: both add up; p=inf is a max, p=-inf a min of |x|.
    Any other p takes a root of the sum, which no reduce type undoes."""
    if porder in (0.0, 1.0):
        return "sum"
    if math.isinf(porder):
        return "max" if porder > 0 else "min"
    return None


def _p_norm_mask(x: TensorSpec, axis: int, asvector: bool) -> tuple[bool, ...]:
    return _reduced_mask(x, () if asvector else (axis,))


def p_norm_forward(
    x: TensorSpec, porder: float, axis: int, epsilon: float, keepdims: bool, asvector: bool
) -> SpmdInfo:
    return reduce_forward(x, _p_norm_mask(x, axis, asvector), keepdims, p_norm_combine(porder))


def p_norm_reverse(
    x: TensorSpec, out: TensorSpec, porder: float, axis: int, epsilon: float, keepdims: bool,
    asvector: bool,
) -> SpmdInfo:
    return reduce_reverse(x, out, _p_norm_mask(x, axis, asvector), keepdims)


def mean_all_forward(x: TensorSpec) -> SpmdInfo:
    return reduce_forward(x, (True,) * len(x.shape), False, "avg")


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


# ---- deliberate deviations from Paddle (docs/deviations/reduction.md) ---------------------------
_Norm = tuple[MultiDims, PartialItems]


def _expected(e: dict[str, Any]) -> _Norm:
    if "multi_dims_mapping" in e:
        mdm = tuple(tuple(d) for d in e["multi_dims_mapping"])
    else:
        mdm = tuple(() if d == -1 else (d,) for d in e["dims_mapping"])
    return mdm, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def _ours(a: Any) -> _Norm | None:
    return (a.multi_dims_mapping, a.partial_items) if isinstance(a, DistAttr) else None


def _case_combine(case: dict[str, Any]) -> Combine:
    op, at = case["op"], case["attrs"]
    if op == "p_norm":
        return p_norm_combine(float(at["porder"]))
    if op == "reduce_base":
        rt = at.get("reduce_type")
        return REDUCE_BASE_TYPES[rt] if isinstance(rt, int) and 0 <= rt < 7 else "?"
    if op == "mean_all":
        return "avg"
    if op == "logsumexp":
        return None
    return AXIS_OPS.get(op) if op in AXIS_OPS else "?"


def _forward_pair(case: dict[str, Any], got: SpmdInfo | BaseException) -> tuple[_Norm, ...] | None:
    """(Paddle's x, ours x, Paddle's out, ours out) of a forward case with a one-tensor answer."""
    exp = case["expected"]
    if case["direction"] != "forward" or "error" in exp or not isinstance(got, SpmdInfo):
        return None
    if len(got.inputs) != 1 or len(got.outputs) != 1:
        return None
    ox, oo = _ours(got.inputs[0]), _ours(got.outputs[0])
    if ox is None or oo is None:
        return None
    return _expected(exp["inputs"][0]), ox, _expected(exp["outputs"][0]), oo


def _is_reduce_type_only(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Same mappings and partial mesh dims; Paddle says sum where the op needs another type."""
    pair = _forward_pair(case, got)
    combine = _case_combine(case)
    if pair is None or combine in (None, "sum", "avg", "?"):
        return False
    px, ox, po, oo = pair
    if px != ox or po[0] != oo[0] or not po[1]:
        return False
    return [d for d, _ in po[1]] == [d for d, _ in oo[1]] and all(
        p == "sum" and o == combine for (_, p), (_, o) in zip(po[1], oo[1], strict=True)
    )


def _replicated_reduced_dims(case: dict[str, Any], got: SpmdInfo | BaseException) -> list[int]:
    """The reduced dims of x we replicate where Paddle keeps them sharded and leaves a partial on
    their mesh dims; every other part of the answer the same. [] if the answers differ otherwise."""
    pair = _forward_pair(case, got)
    if pair is None:
        return []
    (px, pp), (ox, op_), po, (oo_m, oo_p) = pair
    if pp or op_ or po[0] != oo_m or len(px) != len(ox):
        return []
    dropped: list[int] = []
    freed: set[int] = set()
    for i, (p, o) in enumerate(zip(px, ox, strict=True)):
        if p == o:
            continue
        if o or not p:
            return []
        dropped.append(i)
        freed.update(p)
    if not dropped:
        return []
    rest = tuple(item for item in po[1] if item[0] not in freed)
    if rest != oo_p or not freed <= {d for d, _ in po[1]}:
        return []
    return dropped


def _is_not_combinable(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    return _case_combine(case) is None and bool(_replicated_reduced_dims(case, got))


def _is_uneven_mean(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    if _case_combine(case) != "avg":
        return False
    dims = _replicated_reduced_dims(case, got)
    if not dims:
        return False
    x = case["inputs"][0]
    shape = case["mesh"]["shape"]
    n_shards = [shard_product(shape, _expected(x)[0][i]) for i in dims]
    return all(x["shape"][i] % n != 0 for i, n in zip(dims, n_shards, strict=True))


def _is_reduce_all_out_shape(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """logsumexp reverse with reduce_all=True and an ``out`` shaped like a reduction of every dim,
    though the op reduces only over ``axis`` (its kernel does not read reduce_all): we reject it."""
    at = case["attrs"]
    if case["direction"] != "reverse" or not at.get("reduce_all"):
        return False
    if not isinstance(got, RuleArgumentError):
        return False
    shape = case["inputs"][0]["shape"]
    nd = len(shape)
    keep = bool(at.get("keepdims"))
    full = [1] * nd if keep else []
    axes = {a % nd for a in at.get("axis", ())} if nd else set()
    if not axes:
        axes = set(range(nd))
    by_axis = [1 if i in axes else n for i, n in enumerate(shape) if keep or i not in axes]
    return bool(case["outputs"][0]["shape"] == full and by_axis != full)


def _case_reduced(case: dict[str, Any]) -> tuple[bool, ...] | None:
    """The reduced-dims mask of a case's x, or None if its attributes are not a valid reduction."""
    x = case["inputs"][0]
    at = case["attrs"]
    if case["op"] == "p_norm":
        axis: Sequence[int] = () if at.get("asvector") else (at.get("axis", -1),)
    else:
        axis = at.get("axis", ())
    try:
        return _mask(len(x["shape"]), tuple(axis))
    except (RuleArgumentError, TypeError):
        return None


def _is_reverse_out_made_consistent(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Reverse: ours returns the out that our x produces (size-1 reduced dims replicated, no
    partial) where Paddle echoes the given out; x is the same, or Paddle refused two kept size-1
    dims on different mesh dims (a conflict only because it keeps them sharded)."""
    if case["direction"] != "reverse" or not isinstance(got, SpmdInfo):
        return False
    reduced = _case_reduced(case)
    at = case["attrs"]
    keep = bool(at.get("keep_dim", at.get("keepdims", False)))
    ox, oo = _ours(got.inputs[0]), _ours(got.outputs[0])
    if reduced is None or ox is None or oo is None:
        return False
    given = _expected(case["outputs"][0])
    kept_pos = [i for i, r in enumerate(reduced) if keep or not r]
    fixed = tuple(() if reduced[i] else given[0][j] for j, i in enumerate(kept_pos))
    if oo != (fixed, ()) or given == oo:
        return False
    exp = case["expected"]
    if "error" in exp:
        shared = [given[0][j] for j, i in enumerate(kept_pos) if reduced[i] and given[0][j]]
        return "two different mesh dimension" in exp["error"] and len(shared) >= 2
    return _expected(exp["inputs"][0]) == ox and _expected(exp["outputs"][0]) == given


def _is_arg_reverse_axis(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """argmax/argmin reverse with keepdims: Paddle shards x's axis like out's size-1 axis dim."""
    at = case["attrs"]
    if case["direction"] != "reverse" or not at.get("keepdims") or at.get("flatten"):
        return False
    if not isinstance(got, SpmdInfo) or "error" in case["expected"]:
        return False
    ox, oo = _ours(got.inputs[0]), _ours(got.outputs[0])
    px, po = _expected(case["expected"]["inputs"][0]), _expected(case["expected"]["outputs"][0])
    nd = len(case["inputs"][0]["shape"])
    if ox is None or oo is None or not nd:
        return False
    i = at["axis"] % nd
    def cleared(m: _Norm) -> MultiDims:
        return (*m[0][:i], (), *m[0][i + 1 :])
    return bool(px[0][i]) and ox == (cleared(px), px[1]) and oo == (cleared(po), po[1])


def _is_arg_flatten_rank(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """argmax/argmin flatten without keepdims: the index is 0-d; Paddle maps it as rank 1 (more)."""
    at = case["attrs"]
    if not at.get("flatten") or at.get("keepdims") or not isinstance(got, SpmdInfo):
        return False
    if "error" in case["expected"]:
        return False
    ox, oo = _ours(got.inputs[0]), _ours(got.outputs[0])
    px, po = _expected(case["expected"]["inputs"][0]), _expected(case["expected"]["outputs"][0])
    if ox is None or oo is None or ox != px or oo[1] or po[1]:
        return False
    return len(po[0]) == len(oo[0]) + 1 and not any(oo[0]) and not any(po[0])


_TYPED_OPS = {n for n, c in AXIS_OPS.items() if c not in (None, "sum")} | {"p_norm"}
register_deviation(
    "reduce-type", _TYPED_OPS,
    "A max/min/prod/all/any (p_norm p=inf) reduction over a sharded dim leaves a pending partial "
    "of that type; Paddle reports it as a sum partial, which adds the per-shard results.",
    _is_reduce_type_only,
)
register_deviation(
    "reduce-not-combinable", {"frobenius_norm", "logsumexp", "p_norm"},
    "No reduce type combines per-shard norms (p not in 0, 1, inf) or logsumexps: the sharded "
    "reduced dims of x are replicated and the output is exact, where Paddle leaves a sum partial.",
    _is_not_combinable,
)
register_deviation(
    "reduce-uneven-mean", {"mean_all", "reduce_base"},
    "An avg partial is the mean only over equal blocks: a reduced dim that does not divide evenly "
    "over its mesh dims is replicated, where Paddle leaves an avg partial on it.",
    _is_uneven_mean,
)
register_deviation(
    "logsumexp-reduce-all-out", {"logsumexp"},
    "reduce_all=True does not change what logsumexp reduces (Paddle's kernel reads only axis), so "
    "an 'out' shaped like a reduction of every dim is not its output: we raise, Paddle answers.",
    _is_reduce_all_out_shape,
)
register_deviation(
    "reduce-reverse-out", {*AXIS_OPS, "reduce_base", "logsumexp", "p_norm"},
    "Reverse returns the output its x produces: x's reduced dims are replicated, so the output "
    "is neither partial nor sharded on its size-1 reduced dims; Paddle echoes the given out.",
    _is_reverse_out_made_consistent,
)
register_deviation(
    "arg-reverse-axis", {"argmax", "argmin"},
    "argmax/argmin reverse with keepdims replicates the axis in x and out; Paddle shards x's axis "
    "like out's size-1 axis dim, and a sharded axis gives local indices.",
    _is_arg_reverse_axis,
)
register_deviation(
    "arg-flatten-rank", {"argmax", "argmin"},
    "argmax/argmin with flatten and not keepdims return a 0-d index; Paddle maps it with rank 1 "
    "(forward) or rank(out) + 1 (reverse).",
    _is_arg_flatten_rank,
)


# ---- registration ---------------------------------------------------------------------------------
_AXIS_ATTRS = [A("axis", "ints", ()), A("keep_dim", "bool", False)]
_X = [T("x")]
_OUT = [T("out")]

for _name, _combine in AXIS_OPS.items():
    _fwd, _rev = _axis_rule(_combine)
    register_rule(_name, forward=_fwd, reverse=_rev, inputs=_X, outputs=_OUT, attrs=_AXIS_ATTRS,
                  family="reduction",
                  doc=f"ReductionInferSpmd; sharded reduced dims leave a {_combine or 'no'} partial.")

register_rule("reduce_base", forward=reduce_base_forward, reverse=reverse_axis, inputs=_X,
              outputs=_OUT, attrs=[*_AXIS_ATTRS, A("reduce_type", "int", 0)],
              reverse_attrs=_AXIS_ATTRS, family="reduction",
              doc="ReductionInferSpmdBase: reduce_type 0..6 = sum, max, min, product, avg, any, all.")
register_rule("logsumexp", forward=logsumexp_forward, reverse=logsumexp_reverse, inputs=_X,
              outputs=_OUT,
              attrs=[A("axis", "ints", ()), A("keepdims", "bool", False),
                     A("reduce_all", "bool", False)],
              family="reduction", doc="LogSumExpInferSpmd; sharded reduced dims are replicated.")
register_rule("p_norm", forward=p_norm_forward, reverse=p_norm_reverse, inputs=_X, outputs=_OUT,
              attrs=[A("porder", "float", 2.0), A("axis", "int", -1), A("epsilon", "float", 1e-12),
                     A("keepdims", "bool", False), A("asvector", "bool", False)],
              family="reduction", doc="PNormInferSpmd; the partial type depends on porder.")
register_rule("mean_all", forward=mean_all_forward, inputs=_X, outputs=_OUT, family="reduction",
              doc="MeanAllInferSpmd: an avg partial over the mesh dims of x.")
register_rule("mean_all_grad", forward=mean_all_grad, inputs=[T("x"), T("out_grad")],
              outputs=[T("x_grad")], family="reduction", doc="MeanAllGradInferSpmd.")
for _name in ("argmax", "argmin"):
    register_rule(_name, forward=arg_forward, reverse=arg_reverse, inputs=_X, outputs=_OUT,
                  attrs=[A("axis", "int", -1), A("keepdims", "bool", False),
                         A("flatten", "bool", False)],
                  family="reduction", doc="ArgMax/ArgMinInferSpmdBase: the axis is replicated.")

__all__ = ["AXIS_OPS", "REDUCE_BASE_TYPES", "DistAttr", "p_norm_combine", "reduce_forward",
           "reduce_reverse"]
