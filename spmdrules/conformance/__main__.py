"""``python -m spmdrules.conformance PATH [PATH ...] [--json] [--ops NAME ...] [--execute]``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm

from spmdrules.conformance import execution, runner


def _table(tallies: dict[str, runner.OpTally]) -> str:
    rows = [("op", "cases", "agree", "disagree", "crash", "deviation", "unexplained", "agree%")]
    tot = runner.OpTally()
    for op in sorted(tallies):
        t = tallies[op]
        dev = sum(t.deviations.values())
        rows.append(
            (
                op,
                str(t.cases),
                str(t.agree),
                str(t.disagree),
                str(t.crash),
                str(dev),
                str(t.unexplained),
                f"{100.0 * t.agree / max(t.cases, 1):.1f}",
            )
        )
        tot.cases += t.cases
        tot.agree += t.agree
        tot.disagree += t.disagree
        tot.crash += t.crash
        for k, v in t.deviations.items():
            tot.deviations[k] = tot.deviations.get(k, 0) + v
    dev = sum(tot.deviations.values())
    rows.append(
        (
            "TOTAL",
            str(tot.cases),
            str(tot.agree),
            str(tot.disagree),
            str(tot.crash),
            str(dev),
            str(tot.unexplained),
            f"{100.0 * tot.agree / max(tot.cases, 1):.2f}",
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
        if j == 0 or j == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    outside = tot.cases - dev
    lines.append("")
    lines.append(
        f"agreement outside the deviation classes: {tot.agree}/{outside} = "
        f"{100.0 * tot.agree / max(outside, 1):.2f}%"
    )
    for k in sorted(tot.deviations):
        lines.append(f"deviation {k}: {tot.deviations[k]} cases")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        paths = ns.paths or runner.default_case_paths()
        cases = list(runner.iter_cases(paths, ns.ops))
    except (OSError, ValueError) as e:
        print(f"conformance: {e}", file=sys.stderr)
        return 2
    bar = tqdm(
        cases, desc="conformance", unit="case", disable=not sys.stderr.isatty(), file=sys.stderr
    )
    if ns.execute:
        _execute(bar, ns.deviations, ns.show)
        return 0
    tallies: dict[str, runner.OpTally] = {}
    misses: list[runner.CaseResult] = []
    for case in bar:
        r = runner.run_case(case)
        tallies.setdefault(r.op, runner.OpTally()).add(r)
        if r.verdict != "agree":
            misses.append(r)
    if ns.json:
        print(json.dumps(_json(tallies)))
    elif ns.deviations:
        print(runner.deviation_table(runner.deviation_summary(misses)))
    else:
        print(_table(tallies))
        shown = [m for m in misses if m.deviation is None][: ns.show]
        for m in shown:
            print(f"\n{m.case_id} [{m.verdict}]: {m.detail}")
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m spmdrules.conformance",
        description="Run Paddle 3.3.1 conformance cases through spmdrules and compare exactly.",
    )
    ap.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help=".jsonl / .jsonl.gz case files or folders (default: the shipped cases)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--ops", nargs="+", metavar="NAME", help="only these ops")
    ap.add_argument(
        "--show",
        type=int,
        default=0,
        metavar="N",
        help="also list up to N unexplained disagreements and crashes",
    )
    ap.add_argument(
        "--deviations",
        action="store_true",
        help="print the markdown table of deviation classes (as in docs/deviations.md); with "
        "--execute, the table of their proofs: how Paddle's answers to their cases run",
    )
    ap.add_argument(
        "--execute",
        action="store_true",
        help="run every answer, ours and Paddle's, on the simulated mesh; print per op how many "
        "execute ok, malformed or wrong, and per deviation class how Paddle's answers run",
    )
    return ap


def _execute(cases: Iterable[dict[str, Any]], proofs_only: bool, show: int) -> None:
    """``--execute``: run every answer on the simulated mesh; with ``--deviations``, only the
    deviating cases' answers (the proofs)."""
    if proofs_only:
        runs = ((case, runner.run_case(case)) for case in cases)
        print(execution.proof_table(execution.check_result(case, r) for case, r in runs
                                    if r.verdict == "disagree"))
        return
    done = execution.check_cases(cases)
    print(execution.op_table(done))
    print()
    print(execution.proof_table(done))
    for x in [x for x in done if x.ours not in ("ok", "not run")][:show]:
        print(f"\n{x.case_id} [ours {x.ours}]: {x.detail}")


def _json(tallies: dict[str, runner.OpTally]) -> dict[str, Any]:
    return {
        "ops": {
            op: {"cases": t.cases, "agree": t.agree, "disagree": t.disagree, "crash": t.crash}
            for op, t in sorted(tallies.items())
        },
        "cases": sum(t.cases for t in tallies.values()),
        "agree": sum(t.agree for t in tallies.values()),
    }


if __name__ == "__main__":
    sys.exit(main())
