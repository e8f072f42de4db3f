"""The deviations of the pad rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _one_input_for_two(case: dict[str, Any], got: Any) -> bool:
    """Ours answers x and the cotangent; Paddle one attribute (the cotangent's), and the same."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException) or len(exp["inputs"]) != 1:
        return False
    theirs = exp["inputs"][0]["dims_mapping"]
    return (len(got.inputs) == 2 and list(got.inputs[1].dims_mapping) == theirs
            and [list(a.dims_mapping) for a in got.outputs] == [
                e["dims_mapping"] for e in exp["outputs"]])


register_deviation(
    "pad-grad-one-input", {"pad"},
    "Paddle's PadGradInferSpmd takes the cotangent only, so the backward call (x, out_grad) gets "
    "one input attribute for two arguments; we answer both (x laid out as the cotangent).",
    _one_input_for_two,
)
