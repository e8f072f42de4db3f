"""The deviations of label_smooth from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees
from spmdrules.conformance.deviation import paddle_drops_uneven, register_deviation
from spmdrules.core.spec import SpmdInfo


def _absent_prior(case: dict[str, Any]) -> bool:
    p = case["inputs"][1]
    return bool(p.get("absent")) or not p["shape"]


def _keeps_uneven(case: dict[str, Any], got: Any) -> bool:
    return case["direction"] == "forward" and _absent_prior(case) and paddle_drops_uneven(case, got)


register_deviation(
    "label-smooth-keeps-uneven-shard", {"label_smooth"},
    "Without a prior, Paddle lays label_smooth out as a unary op and replicates a dim its mesh "
    "dims do not divide evenly (quirk 6); we keep the shard (the policy of keeps-uneven-shard): "
    "an elementwise op computes a block of any size exactly.",
    _keeps_uneven, kind="parallelism",
)


def _out_rank(case: dict[str, Any], got: Any) -> bool:
    """Paddle's out has prior_dist's (higher) rank; ours is label's, equal on label's dims."""
    exp = case["expected"]
    if case["direction"] != "forward" or "error" in exp or not isinstance(got, SpmdInfo):
        return False
    label = case["inputs"][0]["shape"]
    out = exp["outputs"][0]["dims_mapping"]
    extra = len(out) - len(label)
    if extra <= 0 or any(d != -1 for d in out[:extra]):
        return False
    fixed = dict(exp["outputs"][0], dims_mapping=out[extra:])
    fixed.pop("multi_dims_mapping", None)
    return agrees(dict(case, expected=dict(exp, outputs=[fixed])), got)


register_deviation(
    "label-smooth-out-rank", {"label_smooth"},
    "With a prior_dist of higher rank than label (leading size-1 dims), Paddle answers out an "
    "attribute of the prior's rank, which does not fit out (label's shape); ours is label's "
    "rank with the same mapping on label's dims.",
    _out_rank,
)
