"""The verify report: totals per family, JSON, text and the markdown table of docs/verify.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Final

from spmdrules.verify.runner import DirectionReport, OpReport

_COUNTS: Final = ("cases", "wrong", "over_replicated", "errors", "refused", "no_kernel",
                  "nondeterministic")


def totals(reports: Sequence[OpReport]) -> dict[str, dict[str, int]]:
    """Per family (and ``"all"``): op counts by status and case counts over both directions."""
    fams: dict[str, dict[str, int]] = {}
    for r in reports:
        for key in (r.family, "all"):
            t = fams.setdefault(
                key, {"ops": 0, **dict.fromkeys(_STATUS_KEYS.values(), 0), **dict.fromkeys(_COUNTS, 0)}
            )
            t["ops"] += 1
            t[_STATUS_KEYS[r.status]] += 1
            for d in r.directions():
                for c in _COUNTS:
                    t[c] += getattr(d, c)
    return dict(sorted(fams.items(), key=lambda kv: (kv[0] == "all", kv[0])))


_STATUS_KEYS: Final[dict[str, str]] = {
    "verified": "ops_verified", "wrong": "ops_wrong", "error": "ops_error",
    "no kernel": "ops_no_kernel", "skipped": "ops_skipped", "no cases": "ops_no_cases",
}


def to_json(reports: Sequence[OpReport], *, seed: int, cases: int) -> dict[str, Any]:
    return {
        "seed": seed,
        "cases_per_direction": cases,
        "ops": {r.op: asdict(r) for r in reports},
        "families": totals(reports),
    }


def report_row(r: OpReport) -> str:
    def d(x: DirectionReport | None) -> str:
        if x is None:
            return f"{'-':>17}"
        return f"{x.cases:>5} {x.wrong:>3} {x.over_replicated:>3} {x.errors:>3}"

    return f"{r.op:<28} {r.family:<18} {d(r.forward)}  {d(r.reverse)}  {r.status}"


HEADER: Final = (f"{'op':<28} {'family':<18} {'fwd':>5} {'bad':>3} {'ovr':>3} {'err':>3}  "
                 f"{'rev':>5} {'bad':>3} {'ovr':>3} {'err':>3}  status")


def format_text(reports: Sequence[OpReport]) -> str:
    lines = [HEADER]
    lines += [report_row(r) for r in reports]
    lines.append("")
    lines.append(f"{'family':<20} {'ops':>4} {'ok':>4} {'nokrn':>5} {'skip':>4} {'cases':>6} "
                 f"{'wrong':>5} {'over':>5} {'err':>4}")
    for fam, t in totals(reports).items():
        lines.append(f"{fam:<20} {t['ops']:>4} {t['ops_verified']:>4} {t['ops_no_kernel']:>5} "
                     f"{t['ops_skipped']:>4} {t['cases']:>6} {t['wrong']:>5} "
                     f"{t['over_replicated']:>5} {t['errors']:>4}")
    examples = [(r.op, e) for r in reports for d in r.directions() for e in d.examples]
    if examples:
        lines.append("")
        lines += [f"{op}: {e}" for op, e in examples]
    return "\n".join(lines)


def markdown_table(reports: Sequence[OpReport]) -> str:
    """The per-family totals as the Markdown table docs/verify.md shows."""
    lines = ["| family | ops | verified | cases | wrong | over-replicated | errors |",
             "|---|---|---|---|---|---|---|"]
    for fam, t in totals(reports).items():
        name = "**all**" if fam == "all" else fam
        lines.append(f"| {name} | {t['ops']} | {t['ops_verified']} | {t['cases']} | "
                     f"{t['wrong']} | {t['over_replicated']} | {t['errors']} |")
    return "\n".join(lines)
