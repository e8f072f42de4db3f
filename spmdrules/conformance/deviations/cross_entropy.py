"""The deviations of the cross_entropy rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import agrees_when, register_deviation, rule_module

_rules = rule_module("cross_entropy")


def _reverse_keeps_partial(case: dict[str, Any], got: Any) -> bool:
    return case["direction"] == "reverse" and agrees_when(
        case, got, absent_as_none=False, partial=False
    )


def _rank0_softmax_out(case: dict[str, Any], got: Any) -> bool:
    """Without softmax Paddle gives softmax_out a 0-d mapping; ours is x's, all else agrees."""
    exp = case["expected"]
    if case["attrs"].get("use_softmax", True) or "error" in exp or isinstance(got, BaseException):
        return False
    if exp["outputs"][0]["dims_mapping"] != [] or got.outputs[0] != got.inputs[0]:
        return False
    patched = {**case, "expected": {**exp, "outputs": [exp["inputs"][0], exp["outputs"][1]]}}
    return agrees_when(patched, got, absent_as_none=False, partial=True)


def _soft_label_class_gathered(case: dict[str, Any], got: Any) -> bool:
    """Soft labels, x's classes whole, the label's split: Paddle splits x's classes too and
    claims a whole, non-partial loss; we gather the label's classes. All else agrees."""
    exp = case["expected"]
    if (
        case["direction"] != "forward" or not case["attrs"].get("soft_label", False)
        or "error" in exp or isinstance(got, BaseException)
    ):
        return False
    x_in, label_in = case["inputs"][0], case["inputs"][1]
    ax = case["attrs"].get("axis", -1) % len(x_in["shape"])
    if x_in["dims_mapping"][ax] != -1 or label_in["dims_mapping"][ax] == -1:
        return False
    if exp["inputs"][0]["dims_mapping"][ax] == -1 or got.inputs[0].multi_dims_mapping[ax]:
        return False
    patched = [dict(e, dims_mapping=[-1 if i == ax else d for i, d in enumerate(e["dims_mapping"])])
               for e in (exp["inputs"][0], exp["inputs"][1], exp["outputs"][0])]
    fixed = {**case, "expected": {"inputs": patched[:2], "outputs": [patched[2], exp["outputs"][1]]}}
    return agrees_when(fixed, got, absent_as_none=False, partial=True)


register_deviation(
    "ce-soft-label-class-gathered",
    set(_rules.CE_OPS),
    "With soft labels, a label split over the classes makes Paddle split x's classes too while "
    "claiming a whole, non-partial loss and a softmax normalised per shard; the loss needs every "
    "class, so we gather the label's classes instead.",
    _soft_label_class_gathered,
)
register_deviation(
    "ce-reverse-keeps-partial",
    set(_rules.CE_OPS),
    "The reverse rule keeps the partial status of x, label, softmax_out and loss; softmax and "
    "log of a pending sum are not the sum of the pieces', so we drop them as the forward rule "
    "does.",
    _reverse_keeps_partial,
)
register_deviation(
    "ce-rank0-softmax-out",
    set(_rules.CE_OPS),
    "With use_softmax=False Paddle returns a 0-d mapping for the rank-n softmax output (no valid "
    "attribute); the kernel passes x through, so we give softmax_out x's mapping.",
    _rank0_softmax_out,
)


def _multi_label_sum_gathered(case: dict[str, Any], got: Any) -> bool:
    """The loss summed over the labels, the label dim split: Paddle keeps label and
    smooth_weight split there and claims a whole, non-partial loss; we gather the labels. All
    else agrees."""
    exp = case["expected"]
    if (
        case["direction"] != "forward" or not case["attrs"].get("sum_multi_label_loss", True)
        or "error" in exp or isinstance(got, BaseException)
    ):
        return False
    if all(e["dims_mapping"][-1] == -1 for e in exp["inputs"][1:3]):
        return False
    if got.inputs[1].multi_dims_mapping[-1] or got.inputs[2].multi_dims_mapping[-1]:
        return False
    gathered = [dict(e, dims_mapping=[*e["dims_mapping"][:-1], -1]) for e in exp["inputs"][1:3]]
    for e in gathered:
        e.pop("multi_dims_mapping", None)
    fixed = {**case, "expected": {**exp, "inputs": [exp["inputs"][0], *gathered]}}
    return agrees_when(fixed, got, absent_as_none=False, partial=True)


register_deviation(
    "multi-label-sum-labels-gathered",
    {"c_softmax_with_multi_label_cross_entropy"},
    "With sum_multi_label_loss, a label (and smooth_weight) split over the labels of a row "
    "makes Paddle keep that split while claiming a whole, non-partial loss; each rank would sum "
    "only its own labels, so we gather the labels instead.",
    _multi_label_sum_gathered,
)
