"""The deviations of the reshape rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo

_rules = rule_module("reshape")


def paddle_unsqueeze_positions(x_ndim: int, axis: tuple[int, ...]) -> frozenset[int]:
    """Where Paddle 3.3.1's rule puts the new dims: every axis against the input rank + 1, as a
    set (paddle.unsqueeze itself inserts them one after another)."""
    return frozenset(a + x_ndim + 1 if a < 0 else a for a in axis)


def _agrees_dropped(case: dict[str, Any], got: SpmdInfo) -> bool:
    """Does our answer, carrying some partial, agree with Paddle's once every partial is dropped?"""
    slots = [a for a in (*got.inputs, *got.outputs) if isinstance(a, DistAttr)]
    if len(slots) != len(got.inputs) + len(got.outputs) or not any(a.partial_items for a in slots):
        return False
    return agrees(case, SpmdInfo([a.without_partial() for a in slots[: len(got.inputs)]],
                                 [a.without_partial() for a in slots[len(got.inputs):]]))


def _unsqueeze_axes_differ(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    if not isinstance(got, SpmdInfo):
        return False
    x_ndim = len(case["inputs"][0]["shape"])
    axis = tuple(case["attrs"]["axis"])
    if _rules.inserted_axes(x_ndim, axis) == paddle_unsqueeze_positions(x_ndim, axis):
        return False
    _, direction, args, _ = build_call(case)
    infer = _rules.shape_op_forward if direction == "forward" else _rules.shape_op_reverse
    # a case the dropped partials alone explain is shape-op-keeps-partial's
    return bool(got == infer(_rules.UNSQUEEZE, *args, axis)) and not _agrees_dropped(case, got)


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
    ours = _rules.reverse_variant(_rules.RESHAPE, x, out, shape, checked=True, x_own_partial=False)
    if got != ours:
        return False
    if checked:
        variant = _rules.reverse_variant(_rules.RESHAPE, x, out, shape, checked=True, x_own_partial=True)
        return variant != ours and agrees(case, variant)
    if _rules.reverse_variant(_rules.RESHAPE, x, out, shape, checked=False, x_own_partial=False) == ours:
        return False  # the checks change nothing here
    return any(
        agrees(case, _rules.reverse_variant(_rules.RESHAPE, x, out, shape, checked=False, x_own_partial=own))
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


#: the shape ops whose partials Paddle drops: all but reshape (both directions) and flatten forward
_DROPPING = {"squeeze", "unsqueeze", "unsqueeze2", "flatten"}


def _paddle_drops_partial(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Ours carries a pending partial through the op; Paddle's record is our answer with every
    partial dropped (each tensor reduced first), on the ops and directions where Paddle drops."""
    if not isinstance(got, SpmdInfo):
        return False
    if case["op"] == "flatten" and case["direction"] == "forward":
        return False
    return _agrees_dropped(case, got)


register_deviation(
    "shape-op-keeps-partial",
    _DROPPING,
    "Paddle's squeeze and unsqueeze (both directions) and flatten's reverse drop a pending "
    "partial, so the sum is reduced before the op; these ops only relabel elements, so each "
    "device's piece of the sum squeezes into its piece of the result, and ours keeps the "
    "partial pending to where a consumer needs it whole, on the tensor of that consumer's size.",
    _paddle_drops_partial, kind="parallelism",
)
