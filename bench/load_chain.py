"""Loading and completing a long chain from a model file: where the time and memory go.

    .venv/bin/python bench/load_chain.py [--ops 200000]

A chain of ``--ops`` relu ops on an [64, 64] input annotated ("dp", None) on a 2x2 mesh is
written as a model file (not timed), then read back in a fresh process phase by phase, as
``exchange.load`` does (the bytes dropped after parsing, the records after building): reading the
bytes, ``exchange.parse`` (JSON and the pydantic schema), ``exchange.from_model`` (the graph
builder's checks and shapes), ``complete``, ``summary()`` and the cyclic collector's first pass
over the new objects. Peak memory is the process's high-water resident set size after each
phase (``VmHWM``), so each figure includes the phases before it.

Target (issue 16): 200k ops, the whole path in at most 5 s and 500 MB.
"""

from __future__ import annotations

import argparse
import gc
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import spmdrules as sr
from spmdrules import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.exchange import dump
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def write_chain(n: int, path: Path) -> None:
    with Graph("chain") as g:
        t = g.input("x", [64, 64])
        shard(t, MESH, ("dp", None))
        for _ in range(n):
            t = ops.relu(t)
    dump(g, path)


def measure(path: Path) -> None:
    from spmdrules.completion import complete
    from spmdrules.graph.exchange import from_model, parse

    def peak_mb() -> float:
        # VmHWM: this image's peak (getrusage's maxrss keeps the forking writer's across exec)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    rows = []
    t0 = time.perf_counter()
    text = path.read_bytes()
    rows.append(("read", time.perf_counter() - t0, peak_mb()))
    t = time.perf_counter()
    model = parse(text, str(path))
    del text  # as exchange.load does: the bytes are not kept while the graph is built
    rows.append(("parse (JSON + schema)", time.perf_counter() - t, peak_mb()))
    t = time.perf_counter()
    g = from_model(model, str(path))
    del model  # as exchange.load does: it returns the graph alone
    rows.append(("build the graph", time.perf_counter() - t, peak_mb()))
    t = time.perf_counter()
    r = complete(g)
    rows.append(("complete", time.perf_counter() - t, peak_mb()))
    t = time.perf_counter()
    r.summary()
    rows.append(("summary", time.perf_counter() - t, peak_mb()))
    # the phases run with the cyclic collector paused (core.bulk.without_gc): its first pass
    # over the new objects comes later, at some allocation, so it is charged here
    t = time.perf_counter()
    gc.collect()
    rows.append(("collector's first pass", time.perf_counter() - t, peak_mb()))
    total = time.perf_counter() - t0
    print(f"{path.stat().st_size / 1e6:.1f} MB model file, {g.num_ops} ops")
    print(f"{'phase':24s} {'seconds':>8s} {'peak MB':>8s}")
    for name, sec, mb in rows:
        print(f"{name:24s} {sec:8.2f} {mb:8.0f}")
    print(f"{'total':24s} {total:8.2f} {rows[-1][2]:8.0f}   target <= 5 s, <= 500 MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--measure", metavar="FILE", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.measure:
        measure(Path(ns.measure))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chain.json"
        write_chain(ns.ops, path)
        # a fresh process: the writer's graph and caches do not count
        return subprocess.call([sys.executable, __file__, "--measure", str(path)])


if __name__ == "__main__":
    sys.exit(main())
