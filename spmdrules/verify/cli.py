"""``python -m spmdrules.verify``: the command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from spmdrules.core.errors import SpmdError, UnknownOpError
from spmdrules.core.plugins import add_plugin_option, load_plugins
from spmdrules.engine.registry import get_rule, list_rules
from spmdrules.verify.report import format_text, markdown_table, report_row, to_json
from spmdrules.verify.runner import OpReport, verify


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spmdrules.verify",
        description="Prove every registered SPMD rule by execution on a simulated mesh.",
    )
    p.add_argument("--ops", nargs="+", metavar="NAME", help="verify only these ops")
    p.add_argument("--json", action="store_true", help="print per-op and per-family totals as JSON")
    p.add_argument("--markdown", action="store_true",
                   help="print only the per-family totals, as docs/verify.md's table")
    p.add_argument("--cases", type=int, default=20, metavar="N",
                   help="random cases per op and direction (default 20)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the random seed (default 0)")
    p.add_argument("--no-alternatives", action="store_true",
                   help="skip the search for sharded alternatives (over-replication)")
    add_plugin_option(p)
    args = p.parse_args(argv)
    if args.cases < 1:
        p.error("--cases must be >= 1")
    try:
        load_plugins(args.plugin)  # before --ops is checked: a plugin's op is a name to verify
        for n in args.ops or ():
            get_rule(n)
    except UnknownOpError as e:
        p.error(str(e))
    except SpmdError as e:  # a plugin that fails to load, or registers a name that is taken
        print(f"python -m spmdrules.verify: error: {e}", file=sys.stderr)
        return 1
    names: list[str] = list(args.ops) if args.ops else list_rules()
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(names), unit="op", file=sys.stderr)

    def progress(r: OpReport) -> None:
        if bar is not None:
            bar.set_postfix_str(r.op)
            bar.update()
        elif not (args.json or args.markdown):
            print(report_row(r), file=sys.stderr, flush=True)

    reports = verify(names, cases=args.cases, seed=args.seed,
                     alternatives=not args.no_alternatives, progress=progress)
    if bar is not None:
        bar.close()
    if args.json:
        print(json.dumps(to_json(reports, seed=args.seed, cases=args.cases), indent=1))
    elif args.markdown:
        print(markdown_table(reports))
    else:
        print(format_text(reports))
    return 1 if any(r.status in ("wrong", "error") for r in reports) else 0
