"""Paddle conformance: run Paddle 3.3.1's recorded cases through the public API and compare.

Importing the package registers the deviation classes (``deviations/``, one module per family).
"""

from spmdrules.conformance import deviations
from spmdrules.conformance.calls import build_call
from spmdrules.conformance.runner import (
    CaseResult,
    OpTally,
    default_case_paths,
    deviation_summary,
    deviation_table,
    iter_cases,
    run_case,
    run_cases,
)

__all__ = [
    "CaseResult",
    "OpTally",
    "build_call",
    "default_case_paths",
    "deviation_summary",
    "deviation_table",
    "deviations",
    "iter_cases",
    "run_case",
    "run_cases",
]
