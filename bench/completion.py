"""Completion and planning speed on the GPT decoder (issue 3, section 6).

    .venv/bin/python bench/completion.py [--layers 2 8 32 96 960] [--repeat 7]

The model: B=8, S=1024, H=1024, 16 heads, FFN 4096, vocabulary 50304, on a 2x4 (dp, mp) mesh,
22L+7 ops, 6L+6 annotated tensors. The graph build is not timed.

What is timed: ``complete(g.reset_attrs())``, from annotations alone, with the rules' memo caches
and completion's per-topology index warm (one untimed run first), as in a compiler that
completes many graphs. ``cold s`` is the same with the per-topology index (operand orders,
shapes, the rules' entry points and the repeated blocks) built again inside the timed run.
``rule calls`` counts the rules' runs and ``replayed`` the blocks of repeated layers whose
changes were replayed instead of visited (docs/completion.md, Speed). ``plan`` plans every
reshard edge with a cold plan cache; ``+plan+explain`` is completion, planning and the
explanation index (every tensor's origin and the reshards per tensor) together.

How: each time is the median of ``--repeat`` runs. Before each run, the previous run's result is
freed and ``gc.collect()`` runs; the new result is kept until after the timer stops, so the
timed region holds the run's own work only (not the teardown of the run before it). ``complete``
pauses the cyclic collector during the pass (as it always has), so the objects a run makes are
scanned by the next collection instead: ``gc after s`` times that collection (the run's result
still alive) and ``x L96 +gc`` is the paired ratio with it charged to the run. The machine
is shared and its speed drifts, so ``x L96`` is not a ratio of two medians taken at different
moments: the runs at L and at L=96 alternate, each run at L is divided by the L=96 run next to
it, and the column is the median of those paired ratios (``spread``: their quartiles). ``us/op``
is the completion time per op: constant when growth is linear (L=960 has 9.97x the ops of L=96).

Targets: L=96 completes in <= 0.05 s, L=960 in <= 10x that, peak memory at L=960 < 300 MB, and
completion + planning + explanation index at L=96 < 0.1 s.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable

from spmdrules import ProcessMesh, examples
from spmdrules.completion.driver import Completion, complete
from spmdrules.completion.reshard_plans import plan_reshard
from spmdrules.graph.graph import Graph

BASE = 96  # the ratio column compares every size with this one


def timed(fn: Callable[[], object], keep: list[object]) -> float:
    """Seconds of one ``fn()``; the previous result is freed before, this one after, the timer."""
    return timed_with_gc(fn, keep)[0]


def timed_with_gc(fn: Callable[[], object], keep: list[object]) -> tuple[float, float]:
    """(seconds of one ``fn()``, seconds of the young-generation collection right after it):
    ``complete`` pauses the collector, so that collection scans the objects the run made (its
    result still alive), work the run defers rather than avoids."""
    keep.clear()
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    keep.append(out)
    t1 = time.perf_counter()
    gc.collect(0)  # the young generation: exactly the objects made since the collect above
    return elapsed, time.perf_counter() - t1


def explanation_index(r: Completion) -> int:
    origins = r.origins
    by_tensor: dict[str, list[object]] = {}
    for e in r.reshards:
        by_tensor.setdefault(e.tensor, []).append(e)
    return len(origins) + len(by_tensor)


def full_run(g: Graph) -> Completion:
    plan_reshard.cache_clear()
    r = complete(g.reset_attrs())
    r.plans()
    explanation_index(r)
    return r


def measure(g: Graph, base: Graph, repeat: int) -> dict[str, float]:
    keep: list[object] = []
    g.reset_attrs()
    complete(g)  # warm the rules' caches once
    times, scans, ratios, ratios_gc = [], [], [], []
    for _ in range(repeat):
        t, scan = timed_with_gc(lambda: complete(g.reset_attrs()), keep)
        if base is not g:
            tb, scan_b = timed_with_gc(lambda: complete(base.reset_attrs()), keep)
            ratios.append(t / tb)
            ratios_gc.append((t + scan) / (tb + scan_b))
        times.append(t)
        scans.append(scan)

    done = complete(g.reset_attrs())

    def cold() -> object:
        g.clear_derived()  # the per-topology index (and its repeated blocks) built again
        return complete(g.reset_attrs())

    t_cold = statistics.median(timed(cold, keep) for _ in range(min(repeat, 3)))

    def plan() -> object:
        plan_reshard.cache_clear()
        return tuple(e.plan(done.cost) for e in done.reshards)

    t_plan = statistics.median(timed(plan, keep) for _ in range(repeat))
    t_full = statistics.median(timed(lambda: full_run(g), keep) for _ in range(repeat))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (1.0, 1.0, 1.0)
    return {
        "complete": statistics.median(times), "plan": t_plan, "full": t_full,
        "gc": statistics.median(scans),
        "ratio": statistics.median(ratios) if ratios else 1.0, "q1": q1, "q3": q3,
        "ratio_gc": statistics.median(ratios_gc) if ratios_gc else 1.0,
        "rule_calls": done.rule_calls, "sweeps": done.iterations, "reshards": len(done.reshards),
        "replayed": done.blocks_replayed, "cold": t_cold,
    }


def peak_memory_mb(layers: int, mesh: ProcessMesh) -> tuple[float, float]:
    """(MB held by the built graph, peak MB during completion) under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    g = examples.gpt_decoder(layers, mesh)
    built = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    complete(g)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return built / 2**20, peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32, 96, 960])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc run")
    args = ap.parse_args()
    mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    base = examples.gpt_decoder(BASE, mesh)
    rows = []
    for layers in args.layers:
        g = base if layers == BASE else examples.gpt_decoder(layers, mesh)
        rows.append((layers, g.num_ops, g.num_tensors, measure(g, base, args.repeat)))
        del g
    print(f"{'L':>4} {'ops':>6} {'tensors':>7} {'complete s':>10} {'us/op':>5} {'plan s':>8} "
          f"{'+plan+explain s':>15} {'rule calls':>10} {'replayed':>8} {'sweeps':>6} "
          f"{'reshards':>8} {'cold s':>7} "
          f"{'x L96':>6} {'spread':>11} {'gc after s':>10} {'x L96 +gc':>9}")
    for layers, n_ops, n_t, m in rows:
        print(f"{layers:>4} {n_ops:>6} {n_t:>7} {m['complete']:>10.4f} "
              f"{m['complete'] / n_ops * 1e6:>5.1f} {m['plan']:>8.4f} "
              f"{m['full']:>15.4f} {int(m['rule_calls']):>10} {int(m['replayed']):>8} "
              f"{int(m['sweeps']):>6} {int(m['reshards']):>8} {m['cold']:>7.4f} "
              f"{m['ratio']:6.2f} {m['q1']:5.2f}-{m['q3']:<5.2f} "
              f"{m['gc']:>10.4f} {m['ratio_gc']:9.2f}")
    if not args.no_memory and max(args.layers) >= 960:
        del base
        built, peak = peak_memory_mb(960, mesh)
        print(f"L=960 memory (tracemalloc): graph {built:.0f} MB, peak during completion "
              f"{peak:.0f} MB")


if __name__ == "__main__":
    main()
