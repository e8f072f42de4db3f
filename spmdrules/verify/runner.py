"""Proving a rule: one case, one direction of one op, and every op, by execution."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from spmdrules.core.errors import SpmdError, UnsupportedError
from spmdrules.core.spec import SpmdInfo
from spmdrules.engine.registry import get_rule
from spmdrules.execution.local import Kernel, get_kernel
from spmdrules.execution.single_op import execute
from spmdrules.verify.alternatives import find_alternative
from spmdrules.verify.cases.case import Case, Direction, NoCaseError
from spmdrules.verify.cases.drawing import case_rng, draw_case
from spmdrules.verify.simulation import (
    MAX_DRAWS,
    MAX_EXAMPLES,
    CaseStatus,
    Collective,
    HarnessError,
    KernelLookup,
    Rng,
    answer,
    collective_for,
    draw_values_for,
)


# ---- one case ------------------------------------------------------------------------------------
@dataclass
class CaseResult:
    status: CaseStatus
    detail: str = ""
    alternative: str | None = None


def run_case(case: Case, info: SpmdInfo, kernel: Kernel, rng: Rng, *,
             alternatives: bool = True, collective: Collective | None = None) -> CaseResult:
    """Execute one answered case; see the module doc for the steps."""
    # Blocks may be empty (uneven splits) and values extreme: numpy's warnings are noise here,
    # the comparison with the serial result is the check.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run_case(case, info, kernel, rng, alternatives, collective)


def _run_case(case: Case, info: SpmdInfo, kernel: Kernel, rng: Rng,
              alternatives: bool, collective: Collective | None) -> CaseResult:
    try:
        ins, outs = answer(case, info)
    except HarnessError as e:
        return CaseResult("wrong", f"malformed answer {info!r}: {e}")
    values = [draw_values_for(d, a, rng) for d, a in zip(case.domains, case.inputs, strict=True)]
    trial = execute(case, kernel, values, ins, outs, rng, collective)
    if trial.status == "malformed":  # a block of another shape than claimed: a wrong answer
        return CaseResult("wrong", trial.detail)
    if trial.status != "ok":
        return CaseResult(trial.status, trial.detail)
    alt = (find_alternative(case, kernel, values, ins, outs, trial.serial, rng, collective)
           if alternatives else None)
    return CaseResult("ok", alternative=alt)


# ---- per op --------------------------------------------------------------------------------------
@dataclass
class DirectionReport:
    cases: int = 0
    wrong: int = 0
    over_replicated: int = 0
    errors: int = 0
    refused: int = 0
    no_kernel: int = 0
    nondeterministic: int = 0
    examples: list[str] = field(default_factory=list)


OpStatus = Literal["verified", "wrong", "error", "no kernel", "skipped", "no cases"]


@dataclass
class OpReport:
    op: str
    family: str
    status: OpStatus
    reason: str = ""
    forward: DirectionReport | None = None
    reverse: DirectionReport | None = None
    seconds: float = field(default=0.0, compare=False)

    def directions(self) -> list[DirectionReport]:
        return [d for d in (self.forward, self.reverse) if d is not None]


def verify_direction(
    name: str, direction: Direction, *, cases: int, seed: int, alternatives: bool = True,
    kernels: KernelLookup = get_kernel,
) -> DirectionReport:
    rep = DirectionReport()
    for index in range(cases):
        rng = case_rng(seed, name, direction, index)
        for _ in range(MAX_DRAWS):
            case = draw_case(name, direction, rng)
            try:
                info = case.call()
                break
            except SpmdError:
                rep.refused += 1
        else:
            continue
        try:
            kernel = kernels(case.op)
        except UnsupportedError:
            rep.no_kernel += 1
            continue
        # The registered kernels' in-op communication is simulated; a custom lookup has none.
        col = collective_for(case.op) if kernels is get_kernel else None
        res = run_case(case, info, kernel, rng, alternatives=alternatives, collective=col)
        rep.cases += 1
        where = f"[{direction} seed={seed} case={index}] {case.describe()}"
        if res.status == "wrong":
            rep.wrong += 1
        elif res.status == "error":
            rep.errors += 1
        elif res.status == "nondeterministic":
            rep.nondeterministic += 1
        if res.status != "ok" and len(rep.examples) < MAX_EXAMPLES:
            rep.examples.append(f"{res.status.upper()} {where}: {res.detail}")
        if res.alternative:
            rep.over_replicated += 1
            if len(rep.examples) < MAX_EXAMPLES:
                rep.examples.append(f"OVER-REPLICATED {where}: {res.alternative}")
    return rep


def verify_op(
    name: str, *, cases: int = 20, seed: int = 0, alternatives: bool = True,
    kernels: KernelLookup = get_kernel,
) -> OpReport:
    """Verify rule ``name`` in both directions on ``cases`` random cases each."""
    rule = get_rule(name)
    start = time.perf_counter()
    directions: list[Direction] = ["forward", "reverse"] if rule.has_reverse else ["forward"]
    reps: dict[str, DirectionReport] = {}
    try:
        for d in directions:
            reps[d] = verify_direction(name, d, cases=cases, seed=seed,
                                       alternatives=alternatives, kernels=kernels)
    except NoCaseError as e:
        return OpReport(name, rule.family, "no cases", str(e))
    report = OpReport(name, rule.family, "verified", forward=reps["forward"],
                      reverse=reps.get("reverse"), seconds=time.perf_counter() - start)
    ds = report.directions()
    if any(d.wrong for d in ds):
        report.status = "wrong"
    elif any(d.errors for d in ds):
        report.status = "error"
    elif not any(d.cases for d in ds):
        no_kernel = any(d.no_kernel for d in ds)
        report.status = "no kernel" if no_kernel else "no cases"
        report.reason = (f"no local kernel for {name!r} yet" if no_kernel
                         else "the rule refused every drawn case")
    if not rule.has_reverse and not report.reason:
        report.reason = "no reverse rule (Paddle registers none)"
    return report


def verify(
    names: Iterable[str], *, cases: int = 20, seed: int = 0, alternatives: bool = True,
    kernels: KernelLookup = get_kernel, progress: Callable[[OpReport], None] | None = None,
) -> list[OpReport]:
    out = []
    for n in names:
        r = verify_op(n, cases=cases, seed=seed, alternatives=alternatives, kernels=kernels)
        out.append(r)
        if progress is not None:
            progress(r)
    return out
