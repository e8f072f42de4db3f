"""The deviations of the embedding rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import agrees_when, register_deviation, rule_module

_rules = rule_module("embedding")


def _reverse_keeps_out_partial(case: dict[str, Any], got: Any) -> bool:
    return case["direction"] == "reverse" and agrees_when(
        case, got, absent_as_none=False, partial=False
    )


register_deviation(
    "embedding-reverse-keeps-out-partial",
    set(_rules.EMBEDDING_OPS),
    "Paddle's reverse rule returns out's partial status unchanged while it infers replicated "
    "vocab rows, from which the lookup is complete, not a pending sum; we drop it.",
    _reverse_keeps_out_partial,
)
