"""The deviations of the reshape rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.spec import SpmdInfo

_rules = rule_module("reshape")


def paddle_unsqueeze_positions(x_ndim: int, axis: tuple[int, ...]) -> frozenset[int]:
    """Where Paddle 3.3.1's rule puts the new dims: every axis against the input rank + 1, as a
    set (paddle.unsqueeze itself inserts them one after another)."""
    return frozenset(a + x_ndim + 1 if a < 0 else a for a in axis)


def _unsqueeze_axes_differ(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    if not isinstance(got, SpmdInfo):
        return False
    x_ndim = len(case["inputs"][0]["shape"])
    axis = tuple(case["attrs"]["axis"])
    if _rules._inserted(x_ndim, axis) == paddle_unsqueeze_positions(x_ndim, axis):
        return False
    _, direction, args, _ = build_call(case)
    infer = _rules._forward if direction == "forward" else _rules._reverse
    return bool(got == infer(_rules.UNSQUEEZE, *args, axis))


register_deviation(
    "unsqueeze-sequential-axes",
    {"unsqueeze", "unsqueeze2"},
    "paddle.unsqueeze inserts the axes one after another (a negative axis counts from the rank "
    "reached so far); Paddle's rule reads them as one set of positions against the input rank, "
    "which moves shards onto the new size-1 dims when the axes are unsorted, negative or "
    "repeated. We follow the op.",
    _unsqueeze_axes_differ,
)


def _reverse_variants(
    case: dict[str, Any], got: SpmdInfo | BaseException, checked: bool
) -> bool:
    """Our answer is the rule's, and Paddle's record is the variant of it without divisibility
    checks (``checked=False``; x's partial either way) or with x's own partial (``True``)."""
    if not isinstance(got, SpmdInfo) or case["direction"] != "reverse":
        return False
    _, _, args, attrs = build_call(case)
    x, out = args
    shape = (tuple(attrs["shape"]),)
    ours = _rules._reverse_variant(_rules.RESHAPE, x, out, shape, checked=True, x_own_partial=False)
    if got != ours:
        return False
    if checked:
        variant = _rules._reverse_variant(_rules.RESHAPE, x, out, shape, checked=True, x_own_partial=True)
        return variant != ours and agrees(case, variant)
    if _rules._reverse_variant(_rules.RESHAPE, x, out, shape, checked=False, x_own_partial=False) == ours:
        return False  # the checks change nothing here
    return any(
        agrees(case, _rules._reverse_variant(_rules.RESHAPE, x, out, shape, checked=False, x_own_partial=own))
        for own in (False, True)
    )


register_deviation(
    "reshape-reverse-unchecked-divisibility",
    {"reshape", "reshape2"},
    "Paddle's reverse reshape co-shards a merged dim and keeps a split's shard without checking "
    "that the sizes divide, so its x and out attributes cut the data differently; we apply the "
    "forward's checks in both directions.",
    # a record can show both of Paddle's reverse differences (reshape2/reverse/61): filed here
    lambda case, got: _reverse_variants(case, got, checked=False),
)
register_deviation(
    "reshape-reverse-partial-from-out",
    {"reshape", "reshape2"},
    "Paddle's reverse reshape returns x with its own partial status next to out's, though a "
    "local reshape turns a partial x into an equally partial out; we give x out's partial.",
    lambda case, got: _reverse_variants(case, got, checked=True),
)
