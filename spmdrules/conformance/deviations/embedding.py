"""The deviations of the embedding rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import agrees_when, register_deviation, rule_module
from spmdrules.core.errors import SpmdError

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


def _c_embedding_grad_echo(case: dict[str, Any], got: Any) -> bool:
    """Our rule with Paddle's choices (w_grad the table's given attribute, x's partial handed
    back) gives Paddle's answer or error, and ours differs."""
    if case["direction"] != "reverse" or agrees(case, got):
        return False
    _, _, args, attrs = build_call(case)
    try:
        paddle: Any = _rules.c_embedding_grad(*args, **attrs, echo=True)
    except SpmdError as e:
        paddle = e
    return agrees(case, paddle)


register_deviation(
    "c-embedding-grad-echoes-table",
    {"c_embedding"},
    "Paddle's gradient rule answers w_grad the table's given attribute plus the pending sums over "
    "x's mesh dims: a hidden-dim shard out_grad does not have, or the table's own partial, are "
    "kept (and where they meet a pending sum it raises); x's partial ids are handed back. Ours "
    "lays w_grad out from out_grad's hidden dim and the table's rows, and drops the partials.",
    _c_embedding_grad_echo,
)
