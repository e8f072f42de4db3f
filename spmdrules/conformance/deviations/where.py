"""The deviations of the where rule from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _out_shape(shapes: list[list[int]]) -> list[int]:
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s):
            if n != 1:
                out[ndim - len(s) + i] = n
    return out


def _shards_a_broadcast_dim(case: dict[str, Any], got: Any) -> bool:
    """Paddle's answer shards a size-1 dim that broadcasts against a larger one, or Paddle
    raises over the shard of such a dim in a given operand (which says nothing)."""
    exp = case["expected"]
    if isinstance(got, BaseException):
        return False
    shapes = [t["shape"] for t in case["inputs"]]
    out = _out_shape(shapes)
    mappings = case["inputs"] if "error" in exp else exp["inputs"]
    for shape, e in zip(shapes, mappings, strict=True):
        for i, n in enumerate(shape):
            if n == 1 and out[len(out) - len(shape) + i] > 1 and e["dims_mapping"][i] != -1:
                return True
    return False


def _ranks_differ(case: dict[str, Any], got: Any) -> bool:
    ranks = {len(t["shape"]) for t in case["inputs"]}
    return len(ranks) > 1 and "error" in case["expected"] and not isinstance(got, BaseException)


register_deviation(
    "where-shards-broadcast-dim", {"where"},
    "Paddle shards a size-1 dim of an operand that broadcasts against a larger dim, so a rank "
    "whose block of that dim is empty has no value to broadcast; we replicate broadcast dims.",
    _shards_a_broadcast_dim,
)
register_deviation(
    "where-broadcast-ranks", {"where"},
    "Paddle raises (or fails in a string index) when the operands' ranks differ; numpy's "
    "broadcasting defines the op, and we answer it.",
    _ranks_differ,
)
