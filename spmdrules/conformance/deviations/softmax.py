"""The deviations of the softmax rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import paddle_drops_uneven, register_deviation, rule_module

_rules = rule_module("softmax")


def _keeps_uneven(case: dict[str, Any], got: Any) -> bool:
    """x and out share a shape: Paddle's answer is ours with an uneven dim replicated on one
    side (quirk 9)."""
    return paddle_drops_uneven(case, got)


register_deviation(
    "softmax-keeps-uneven-shard",
    set(_rules.SOFTMAX_OPS),
    "A dim that its mesh dims do not divide evenly: Paddle replicates it on one side only (the "
    "output in forward, the input in reverse), so the sides disagree; we keep the shard on both "
    "sides, as transpose does (the policy of keeps-uneven-shard).",
    _keeps_uneven,
)
