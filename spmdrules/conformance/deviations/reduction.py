"""The deviations of the reduction rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo
from spmdrules.engine.description import infer_forward, infer_reverse
from spmdrules.engine.rulekit import shard_product

_rules = rule_module("reduction")


_Norm = tuple[MultiDims, PartialItems]


def _expected(e: dict[str, Any]) -> _Norm:
    if "multi_dims_mapping" in e:
        mdm = tuple(tuple(d) for d in e["multi_dims_mapping"])
    else:
        mdm = tuple(() if d == -1 else (d,) for d in e["dims_mapping"])
    return mdm, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def _ours(a: Any) -> _Norm | None:
    return (a.multi_dims_mapping, a.partial_items) if isinstance(a, DistAttr) else None


def _case_combine(case: dict[str, Any]) -> str | None:
    op, at = case["op"], case["attrs"]
    if op == "p_norm":
        combine: str | None = _rules.p_norm_combine(float(at["porder"]))
        return combine
    if op == "reduce_base":
        rt = at.get("reduce_type")
        return _rules.REDUCE_BASE_TYPES[rt] if isinstance(rt, int) and 0 <= rt < 7 else "?"
    if op == "mean_all":
        return "avg"
    if op == "logsumexp":
        return None
    axis_ops: dict[str, str | None] = _rules.AXIS_OPS
    return axis_ops.get(op) if op in axis_ops else "?"


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
        mask: tuple[bool, ...] = _rules.reduced_dims(len(x["shape"]), tuple(axis))
        return mask
    except (RuleArgumentError, TypeError):
        return None


def _uncarried(case: dict[str, Any], got: SpmdInfo | BaseException) -> SpmdInfo | BaseException:
    """Our answer as it is without carrying x's (out's) pending sums through a linear reduction:
    the rule's answer with ``linear=False``, else ``got`` itself."""
    if case["op"] not in _rules.LINEAR or not isinstance(got, SpmdInfo):
        return got
    if not any(t.get("partial") for t in (*case["inputs"], *case.get("outputs", []))):
        return got  # nothing pending to carry
    _, direction, args, attrs = build_call(case)
    axis, keep = tuple(attrs["axis"]), bool(attrs["keep_dim"])
    desc = _rules.axis_reduction(case["op"], args[0].shape, axis, keep)
    plain = dataclasses.replace(desc, linear=(), policy=dataclasses.replace(
        desc.policy, reverse_linear=False), names=("x", "out"))
    if direction == "forward":
        return infer_forward(plain, args[:1])
    return infer_reverse(plain, args[:1], args[1:2])


def _is_sum_keeping_partial(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Forward: ours carries x's pending sums through the sum; Paddle's record is our answer
    without that carry (x reduced first)."""
    if case["direction"] != "forward" or "error" in case["expected"]:
        return False
    nl = _uncarried(case, got)
    return nl is not got and nl != got and agrees(case, nl)


def _is_reverse_out_made_consistent(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Reverse: ours returns the out that our x produces (size-1 reduced dims replicated, no
    partial but the pending sums a linear reduction carries from an equally pending x) where
    Paddle echoes the given out; x is the same (up to that carry), or Paddle refused two kept
    size-1 dims on different mesh dims (a conflict only because it keeps them sharded)."""
    if case["direction"] != "reverse" or not isinstance(got, SpmdInfo):
        return False
    got = _uncarried(case, got)
    if not isinstance(got, SpmdInfo):
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


_TYPED_OPS = {n for n, c in _rules.AXIS_OPS.items() if c not in (None, "sum")} | {"p_norm"}
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
    "reduce-sum-keeps-partial", set(_rules.LINEAR),
    "Paddle reduces a pending sum of x before a sum; a sum is linear, so each device sums its "
    "piece and ours keeps the sum pending on the smaller reduced output, to be reduced where a "
    "consumer needs it whole.",
    _is_sum_keeping_partial, kind="parallelism",
)
register_deviation(
    "reduce-reverse-out", {*_rules.AXIS_OPS, "reduce_base", "logsumexp", "p_norm"},
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
