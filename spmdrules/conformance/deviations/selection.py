"""The deviations of the selection rules (nonzero, unique) from Paddle 3.3.1."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _two_sharded_dims(case: dict[str, Any], got: Any) -> bool:
    """Quirk 24: Paddle raises when two dims of x are sharded; the op is defined, and we answer
    (everything replicated, as Paddle answers otherwise)."""
    given = case["inputs"][0] if case["direction"] == "forward" else case["outputs"][0]
    sharded = [d for d in given["dims_mapping"] if d != -1]
    return (len(sharded) >= 2 and "error" in case["expected"]
            and not isinstance(got, BaseException))


register_deviation(
    "nonzero-two-sharded-dims", {"nonzero"},
    "Paddle's nonzero rule raises ('Tensor Axis[1] is Sharded by two different mesh dimension') "
    "whenever two dims of x (in reverse, of the result) are sharded, which is valid input; we "
    "answer it replicated, as Paddle answers every other case.",
    _two_sharded_dims,
)
