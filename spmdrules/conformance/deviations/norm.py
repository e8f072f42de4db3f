"""The deviations of the norm rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import agrees_when, register_deviation


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


register_deviation(
    "norm-reverse-keeps-partial",
    {"layer_norm"},
    "layer_norm's reverse rule keeps the partial status of every tensor (x, scale, bias, out, "
    "mean, variance), even on a mesh dim that also shards out; a norm of a pending sum is not "
    "the sum of norms, so we drop them as the forward rule and fused_rms_norm do.",
    _reverse_keeps_partial,
)
