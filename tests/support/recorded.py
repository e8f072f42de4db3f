"""The shipped conformance cases, each with our comparison's result (``tests/conformance`` shares
one run per session through its ``compared`` fixture)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import spmdrules as sr
from spmdrules import conformance


@dataclass
class Compared:
    """Per op tallies, every non-agreeing result, and every case with its result."""

    tallies: dict[str, conformance.OpTally]
    misses: list[conformance.CaseResult]
    cases: list[tuple[dict[str, Any], conformance.CaseResult]]


def compare_shipped() -> Compared:
    """Every shipped case of every registered op, compared with Paddle's answer."""
    paths = conformance.default_case_paths()
    assert len(paths) >= 180, "the shipped conformance data is missing"
    ops = [p.name.split(".jsonl")[0] for p in paths]
    registered = [op for op in ops if op in set(sr.list_rules())]
    tallies: dict[str, conformance.OpTally] = {}
    misses: list[conformance.CaseResult] = []
    cases = []
    for case in conformance.iter_cases(paths, registered):
        r = conformance.run_case(case)
        tallies.setdefault(r.op, conformance.OpTally()).add(r)
        if r.verdict != "agree":
            misses.append(r)
        cases.append((case, r))
    return Compared(tallies, misses, cases)
