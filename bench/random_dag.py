"""Completion on a seeded random DAG of mixed ops with careless annotations (issue 16, item 4).

    .venv/bin/python bench/random_dag.py [--ops 50000] [--seed 0] [--fraction 0.1]
    .venv/bin/python bench/random_dag.py --sweep    # many seeds and sizes, careless and even

Builds ``tests/support/random_dags.random_dag`` (elementwise with broadcasting, matmul,
reductions, transpose, reshape, softmax, concat, split, slice, embedding, layer_norm; a fraction
of the tensors annotated on a 2-D or 3-D mesh, some partial, some with priorities), completes it
and prints whether it converged, the sweeps, the frozen tensors, the reshard edges no plan
reaches, and the time to build, complete and summarise. ``--sweep`` completes 50-op graphs for
seeds 0-59, 500-op graphs for seeds 100-159 and 2000-op graphs for seeds 1-2, each with careless
and with even annotations, and lists every one that did not converge or raised.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from random_dags import random_dag  # tests/support is not a package: found through the path

from spmdrules.completion import complete

SWEEP = ((50, range(0, 60)), (500, range(100, 160)), (2000, range(1, 3)))


def sweep() -> None:
    bad: list[str] = []
    runs = 0
    t0 = time.process_time()
    for n, seeds in SWEEP:
        for seed in seeds:
            for even in (False, True):
                runs += 1
                try:
                    r = complete(random_dag(seed, n, even=even))
                    r.summary()
                    if not r.converged:
                        bad.append(f"{n} ops, seed {seed}, even={even}: frozen {r.unconverged}")
                except Exception as e:  # a raise is what the sweep looks for: list it
                    bad.append(f"{n} ops, seed {seed}, even={even}: {type(e).__name__}: {e}")
    print(f"{runs} random DAGs completed in {time.process_time() - t0:.1f} s of CPU; "
          f"{len(bad)} did not converge or raised")
    for line in bad:
        print("  " + line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--sweep", action="store_true", help="many seeds and sizes (see above)")
    args = ap.parse_args()
    if args.sweep:
        sweep()
        return
    t0 = time.perf_counter()
    g = random_dag(args.seed, args.ops, fraction=args.fraction)
    t1 = time.perf_counter()
    r = complete(g)
    t2 = time.perf_counter()
    r.summary()
    t3 = time.perf_counter()
    frozen = r.unconverged
    print(f"random DAG seed {args.seed}: {g.num_ops} ops, {g.num_tensors} tensors, "
          f"{r.num_annotated} annotated")
    print(f"converged {r.converged}, sweeps {r.iterations}, rule calls {r.rule_calls}")
    print(f"frozen tensors {len(frozen)}" + (f": {', '.join(frozen[:10])}" if frozen else ""))
    print(f"reshards {len(r.reshards)}, with no plan {len(r.unplannable())}")
    print(f"time: build {t1 - t0:.2f} s, complete {t2 - t1:.2f} s, summary {t3 - t2:.2f} s")


if __name__ == "__main__":
    main()
