"""``python -m spmdrules.rules --stats``: the share of rules the engine derives from data."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spmdrules.engine.derived import table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spmdrules.rules",
        description="The registered SPMD rules.")
    parser.add_argument(
        "--stats", action="store_true",
        help="per family, the registered names (aliases included) whose forward and reverse the "
        "engine derives from a Description or a DimTrans")
    args = parser.parse_args(argv)
    if not args.stats:
        parser.print_help()
        return 2
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
