"""The deviations of the convolution rules from Paddle 3.3.1: one class per quirk.

``rules/conv.py`` reproduces Paddle's answers when asked to with a set of named quirks. A class
explains a disagreement when Paddle's answer is exactly the rule's answer with the smallest set
of quirks that gives it (of the op's own), and this class's quirk is the first of that set.
docs/deviations/conv.md has the proof of each by execution.
"""

from __future__ import annotations

import itertools
from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.errors import SpmdError

_rules = rule_module("conv")

#: the quirks Paddle 3.3.1's rule for each op has
_PADDLE: dict[str, frozenset[str]] = {
    "conv2d": frozenset({_rules.SPATIAL_KEPT, _rules.KERNEL_SHARDED, _rules.REVERSE_PARTIAL}),
    "conv3d": frozenset(_rules.QUIRKS) - {_rules.REVERSE_PARTIAL},
    "conv2d_transpose": frozenset(_rules.QUIRKS) - {_rules.REVERSE_PARTIAL},
    "depthwise_conv2d": frozenset(_rules.QUIRKS) - {_rules.GROUPED_CHANNEL, _rules.REVERSE_PARTIAL},
}


def _answer(case: dict[str, Any], quirks: frozenset[str]) -> Any:
    name, direction, args, attrs = build_call(case)
    op = case["op"]
    fmt = attrs.get("data_format", "NCDHW" if op == "conv3d" else "NCHW")
    groups = int(attrs.get("groups", 1))
    try:
        if name.endswith("_grad"):
            return _rules.grad_answer(name, *args, fmt, groups, False, quirks)
        if direction == "forward":
            return _rules.forward_answer(op, *args, fmt, groups, False, quirks)
        return _rules.reverse_answer(op, *args, fmt, groups, False, quirks)
    except SpmdError as e:
        return e


def _culprit(case: dict[str, Any]) -> str | None:
    """The first quirk (in ``QUIRKS`` order) of the smallest set of the op's quirks with which the
    rule gives Paddle's answer; None when no set does."""
    quirks = [q for q in _rules.QUIRKS if q in _PADDLE.get(case["op"], frozenset())]
    for size in range(1, len(quirks) + 1):
        for subset in itertools.combinations(quirks, size):
            if agrees(case, _answer(case, frozenset(subset))):
                return str(subset[0])
    return None


def _quirk(q: str) -> Any:
    def explains(case: dict[str, Any], got: Any) -> bool:
        return _culprit(case) == q

    return explains


_OPS = set(_rules.CONV_OPS)
register_deviation(
    "conv-spatial-kept", _OPS,
    "A sharded H/W/D of the input stays sharded on the output with no halo: a block's windows "
    "that reach past its edge read nothing (or its padding) instead of the neighbour's rows. Ours "
    "replicates the spatial dims unless the op opts into spatial sharding (then the lowering adds "
    "the halo).",
    _quirk(_rules.SPATIAL_KEPT),
)
register_deviation(
    "conv-kernel-sharded", _OPS,
    "Paddle names the filter's kernel dims with the input's spatial letters, so a sharded kernel "
    "dim shards the input's H/W and the output's (or conflicts with them). A kernel cut into "
    "pieces computes windows of another size; ours keeps the kernel dims whole.",
    _quirk(_rules.KERNEL_SHARDED),
)
register_deviation(
    "conv-channels-first-output", _OPS,
    "With data_format NHWC/NDHWC Paddle lays the output out as if it were NCHW/NCDHW (output "
    "letters n,m,h,w): the output's channel shard lands on its H dim. Ours reads the output in "
    "its own layout.",
    _quirk(_rules.CHANNELS_FIRST_OUT),
)
register_deviation(
    "conv-grouped-channel", _OPS,
    "With groups > 1 Paddle shards the input channels like the filter's (of another size: C/g) "
    "and sums the pieces: a rank's block of input channels is not the block of every group the "
    "filter's piece multiplies. Ours keeps the channels whole when groups > 1.",
    _quirk(_rules.GROUPED_CHANNEL),
)
register_deviation(
    "conv-grad-three-merges", _OPS,
    "Paddle's gradient rules lay out input_grad, filter_grad and the three arguments from three "
    "separate merges, so the arguments' layouts are not the ones the gradients are read from "
    "(and depthwise's input_grad drops the pending sum over output channels). Ours merges the "
    "three once and reads every tensor off that merge.",
    _quirk(_rules.GRAD_MERGES),
)
register_deviation(
    "conv-reverse-keeps-partial", _OPS,
    "conv2d's reverse rule hands the output back with its pending sums while the inputs it infers "
    "(read off the output's n, m, h, w) leave no channel sharded: the output they compute is "
    "complete, and declaring it partial sums it again. Ours drops the output's pending sums.",
    _quirk(_rules.REVERSE_PARTIAL),
)
