"""``plan.apply`` speed against the number of plan entries (issue 23, item 24).

    .venv/bin/python bench/plan_apply.py [--entries 500 2000 5000] [--repeat 3]
                                         [--baseline af95ee8] [--baseline-max 5000]

The model: a chain of N linears ``layers.{i}.fc`` (a [16, 16] weight read by a matmul, and a
bias), and a plan of N entries, one per linear, ColwiseParallel and RowwiseParallel in turn: the
shape of a per-layer Megatron plan at N layers. Two kinds of keys are timed: ``name`` keys
(``layers.7.fc``, read as that module's name) and ``glob`` keys (``layers.7.f*``, a glob with a
literal prefix). The graph build is not timed; each run gets a fresh graph.

Side by side, in the same run: ``--baseline REV`` loads ``spmdrules/plan/apply.py`` as it was at
git revision REV (default af95ee8, before the key index: every key was matched against every
name, so the cost per entry grew with the entries) and times it on the same graphs, the runs of
the two alternating so that the machine's drift falls on both alike; sizes above
``--baseline-max`` skip the baseline. ``--baseline none`` times ours only.

Columns: CPU seconds of one ``apply`` (median of ``--repeat``), microseconds per entry, and
``x per entry``: the cost per entry over the cost per entry at the smallest size (1.0 when the
growth is linear). ``baseline/ours`` is the baseline's time over ours at that size.

Target: linear (``x per entry`` near 1 at 5000 entries), and 5000 entries under 2 s.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from spmdrules import ProcessMesh, plan
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

ROOT = Path(__file__).resolve().parents[1]
MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
Apply = Callable[[Graph, ProcessMesh, Mapping[str, Any]], object]


def chain(n: int) -> Graph:
    g = Graph("chain")
    with g:
        h = g.input("x", [4, 16])
        for i in range(n):
            w = g.param(f"layers.{i}.fc.weight", [16, 16])
            b = g.param(f"layers.{i}.fc.bias", [16])
            h = ops.add(ops.matmul(h, w, name=f"layers.{i}.fc.matmul"), b,
                        name=f"layers.{i}.fc.add")
    return g


def entries(n: int, kind: str) -> dict[str, Any]:
    key = "layers.{}.fc" if kind == "name" else "layers.{}.f*"
    return {key.format(i): plan.ColwiseParallel() if i % 2 == 0 else plan.RowwiseParallel()
            for i in range(n)}


def baseline(rev: str) -> Apply | None:
    """``apply`` of ``spmdrules/plan/apply.py`` at git revision ``rev``, or None without git."""
    try:
        source = subprocess.run(["git", "show", f"{rev}:spmdrules/plan/apply.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"baseline {rev}: not measured ({e})")
        return None
    module = ModuleType(f"plan_apply_{rev}")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{rev}:spmdrules/plan/apply.py", "exec"), module.__dict__)
    fn: Apply = module.apply
    return fn


def cold_caches() -> None:
    """Empty the compiled-pattern caches (``re``'s 512 entries, ``fnmatch``'s own), which would
    otherwise hold every key of a run of up to 512 entries for the next run, but not of more."""
    re.purge()
    clear = getattr(getattr(fnmatch, "_compile_pattern", None), "cache_clear", None)
    if clear is not None:
        clear()


def timed(fn: Apply, n: int, kind: str) -> float:
    """CPU seconds of one ``fn`` on a fresh graph (built, and the last run's freed, untimed),
    with the pattern caches cold."""
    g, p = chain(n), entries(n, kind)
    gc.collect()
    cold_caches()
    t0 = time.process_time()
    fn(g, MESH, p)
    return time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, nargs="+", default=[500, 2000, 5000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", choices=["name", "glob"], default=["name", "glob"])
    ap.add_argument("--baseline", default="af95ee8", help="a git revision, or 'none'")
    ap.add_argument("--baseline-max", type=int, default=5000)
    args = ap.parse_args()
    old = None if args.baseline == "none" else baseline(args.baseline)
    print(f"{'entries':>7} {'keys':>5} {'ours s':>8} {'us/entry':>9} {'x per entry':>11}"
          f" {'baseline s':>10} {'us/entry':>9} {'baseline/ours':>13}", flush=True)
    for kind in args.kinds:
        first: float | None = None
        for n in sorted(args.entries):
            with_old = old is not None and n <= args.baseline_max
            ours, theirs = [], []
            for _ in range(args.repeat):
                ours.append(timed(plan.apply, n, kind))
                if with_old:
                    assert old is not None
                    theirs.append(timed(old, n, kind))
            t = statistics.median(ours)
            first = first if first is not None else t / n
            row = f"{n:>7} {kind:>5} {t:>8.3f} {t / n * 1e6:>9.0f} {t / n / first:>11.2f}"
            if theirs:
                b = statistics.median(theirs)
                row += f" {b:>10.3f} {b / n * 1e6:>9.0f} {b / t:>13.1f}"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
