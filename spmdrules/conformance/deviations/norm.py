"""The deviations of the norm rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import agrees_when, register_deviation
from spmdrules.core.errors import RuleArgumentError


def _reverse_keeps_partial(case: dict[str, Any], got: Any) -> bool:
    exp = case["expected"]
    kept = "error" not in exp and any(
        e.get("partial") for e in (*exp["inputs"], *exp["outputs"]) if e is not None
    )
    return (
        kept
        and case["direction"] == "reverse"
        and agrees_when(case, got, absent_as_none=True, partial=False)
    )


def _reverse_rank0_param(case: dict[str, Any], got: Any) -> bool:
    return (
        case["direction"] == "reverse"
        and "error" not in case["expected"]
        and isinstance(got, RuleArgumentError)
        and "has shape [] but must be 1-D" in str(got)
        and any(t.get("absent") == "rank0" for t in case["inputs"])
    )


register_deviation(
    "norm-reverse-keeps-partial",
    {"layer_norm"},
    "layer_norm's reverse rule keeps the partial status of every tensor (x, scale, bias, out, "
    "mean, variance), even on a mesh dim that also shards out; a norm of a pending sum is not "
    "the sum of norms, so we drop them as the forward rule and fused_rms_norm do.",
    _reverse_keeps_partial,
)
register_deviation(
    "norm-reverse-rank0-param",
    {"layer_norm"},
    "layer_norm's reverse rule returns a 1-D [-1] attribute for a 0-d scale/bias (forward "
    "rejects them); we reject a 0-d scale/bias in both directions.",
    _reverse_rank0_param,
)
