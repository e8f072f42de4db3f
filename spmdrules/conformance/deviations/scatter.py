"""The deviations of the scatter rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _sharded(t: Any) -> bool:
    if isinstance(t, list):
        return any(_sharded(e) for e in t)
    return any(d != -1 for d in t.get("dims_mapping", []))


def _positions_sharded(case: dict[str, Any], got: Any) -> bool:
    """Paddle kept the positions (the index, the updates' leading dims) sharded: its result is a
    pending sum (quirk 16) or it raises over their shards; ours replicates them."""
    if isinstance(got, BaseException):
        return False
    exp = case["expected"]
    if "error" in exp:
        return "two different mesh dimension" in exp["error"] and _sharded(case["inputs"][1])
    return (any(e.get("partial") for e in exp["outputs"] if isinstance(e, dict))
            or _sharded(exp["inputs"][1])
            or (case["direction"] == "forward" and _sharded(case["inputs"][1])))


def _misaligned(case: dict[str, Any], got: Any) -> bool:
    """scatter_nd_add's updates are index[:-1] + x[k:], but Paddle pairs updates' dim j with x's
    dim j: x's indexed dims (the first k) take the shards of the updates' leading dims, and the
    ranks must agree in a way the op does not ask (Paddle raises when rank(index) exceeds
    rank(updates))."""
    if isinstance(got, BaseException):
        return False
    index = case["inputs"][1]["shape"]
    k = index[-1]
    exp = case["expected"]
    if "error" in exp:
        return "Index's rank" in exp["error"]
    return (len(index) - 1 != k or len(exp["inputs"][1]["dims_mapping"]) != len(index)
            or any(d != -1 for e in (exp["inputs"][0], exp["outputs"][0])
                   for d in e["dims_mapping"][:k]))


register_deviation(
    "scatter-sharded-positions", {"scatter", "scatter_nd_add"},
    "Quirk 16: with the index (and the updates' rows) sharded, Paddle marks the result a pending "
    "sum, even for an overwrite; but every rank's result holds all of x, so the sum counts x once "
    "per rank (and overwritten rows are not sums). We replicate the positions, and the result is "
    "complete.",
    _positions_sharded,
)
register_deviation(
    "scatter-nd-add-misaligned", {"scatter_nd_add"},
    "Paddle pairs the updates' dim j with x's dim j, but the updates are index[:-1] + x[k:]: x's "
    "indexed dims take the shards of the updates' leading dims, and Paddle raises when rank(index) "
    "exceeds rank(updates), which the op allows; we pair the dims the op pairs.",
    _misaligned,
)


def _negative_axis(case: dict[str, Any], got: Any) -> bool:
    return (case["attrs"].get("axis", 0) < 0 and "error" in case["expected"]
            and not isinstance(got, BaseException))


register_deviation(
    "put-along-axis-negative-axis", {"put_along_axis"},
    "Quirk 22: Paddle fails with a raw std::out_of_range on a negative axis; we normalise it.",
    _negative_axis,
)


def _indices_keep_partial(case: dict[str, Any], got: Any) -> bool:
    """Quirk 14: only the pending sums Paddle keeps on the indices differ."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    kept = [e for e in exp["inputs"][1] if e.get("partial")]
    theirs = [[e["dims_mapping"] for e in exp["inputs"][1]], exp["inputs"][0]["dims_mapping"]]
    ours = [[list(a.dims_mapping) for a in got.inputs[1]], list(got.inputs[0].dims_mapping)]
    return bool(kept) and theirs == ours


register_deviation(
    "index-put-keeps-input-partial", {"index_put"},
    "Quirk 14: Paddle keeps an index's pending sum on the returned input though the positions a "
    "rank writes are then pieces of a sum, not positions; we resolve the pending sums first.",
    _indices_keep_partial,
)


def _broadcast_dims(case: dict[str, Any]) -> list[int]:
    """The dims of x (past the k indexed ones) that index_put's value broadcasts over."""
    x = case["inputs"][0]["shape"]
    k = len(case["inputs"][1])
    value = case["inputs"][2]["shape"]
    off = 1 + len(x) - k - len(value)
    # as the rule reads it: a value of lower rank than the rows is replicated, so pairs nothing
    paired = {k + s - 1 for s, n in enumerate(value) if s >= 1 and n == x[k + s - 1]} if not off \
        else set()
    return [d for d in range(k, len(x)) if d not in paired]


def _grad_misses_broadcast_sum(case: dict[str, Any], got: Any) -> bool:
    """Paddle keeps x_grad sharded on a dim the value broadcasts over and answers value_grad
    replicated with no pending sum: each rank then sums only its shard of those rows."""
    exp = case["expected"]
    if case["direction"] != "reverse" or "error" in exp or isinstance(got, BaseException):
        return False
    return any(exp["outputs"][0]["dims_mapping"][d] != -1 for d in _broadcast_dims(case))


register_deviation(
    "index-put-grad-misses-broadcast-sum", {"index_put"},
    "index_put's value cotangent sums the rows the value broadcasts over. Paddle keeps x_grad "
    "sharded on such a dim and answers value_grad replicated, not pending: each rank's value_grad "
    "then sums one shard of the rows. We keep those dims whole.",
    _grad_misses_broadcast_sum,
)
