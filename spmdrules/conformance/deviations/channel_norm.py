"""The deviations of the channel norms (batch_norm, group_norm, instance_norm) from Paddle 3.3.1."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees
from spmdrules.conformance.deviation import register_deviation
from spmdrules.core.spec import SpmdInfo


def _grad_omits_bias(case: dict[str, Any], got: Any) -> bool:
    """Paddle answers 5 input attributes for the 6 tensors of instance_norm's gradient rule: none
    for bias. Ours answers bias replicated; without that slot the answers are equal."""
    exp = case["expected"]
    if case["direction"] != "reverse" or "error" in exp or not isinstance(got, SpmdInfo):
        return False
    if len(exp["inputs"]) != len(got.inputs) - 1 or len(got.inputs) != 6:
        return False
    bias = got.inputs[2]
    if isinstance(bias, tuple):
        return False
    if bias is not None and (any(bias.multi_dims_mapping) or bias.partial_items):
        return False
    trimmed = SpmdInfo(got.inputs[:2] + got.inputs[3:], got.outputs)
    shown = dict(case, inputs=case["inputs"][:2] + case["inputs"][3:])
    return agrees(shown, trimmed)


register_deviation(
    "instance-norm-grad-omits-bias",
    {"instance_norm"},
    "Paddle's gradient rule takes bias but answers no attribute for it (5 input attributes for 6 "
    "tensors), so its answer cannot be lowered: every operand of an op needs a layout. Ours "
    "answers bias replicated and is otherwise Paddle's.",
    _grad_omits_bias,
)
