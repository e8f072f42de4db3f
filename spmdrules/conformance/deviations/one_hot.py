"""The deviations of the one_hot rule from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _keeps_input_partial(case: dict[str, Any], got: Any) -> bool:
    """Only x's pending reduction differs: Paddle keeps it on x, we resolve it first."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    x = exp["inputs"][0]
    return (bool(x.get("partial")) and not got.inputs[0].partial
            and list(got.inputs[0].dims_mapping) == x["dims_mapping"]
            and [list(a.dims_mapping) for a in got.outputs] == [
                e["dims_mapping"] for e in exp["outputs"]])


register_deviation(
    "one-hot-keeps-input-partial", {"one_hot"},
    "Quirk 14: Paddle keeps x's pending sum on the returned input yet gives a complete result, but "
    "the one-hot rows of pieces of a sum are not pieces of the one-hot rows of the sum; we resolve "
    "the pending sum first.",
    _keeps_input_partial,
)
