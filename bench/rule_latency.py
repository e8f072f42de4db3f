"""Median microseconds per infer_forward / infer_reverse call, ours against Paddle 3.3.1's C++ rules.

    python bench/rule_latency.py [--paddle-python /path/to/python-with-paddle] [--json]

"first call" times calls on never-seen specs: each call gets a mesh with different process ids and
a different batch size (dim 0 of the activations), so neither the memo cache nor any cache of
shapes or mappings inside a rule can answer it; "repeat" times a repeated call (a cache
hit). If ``paddle`` is importable here, or ``--paddle-python`` names an interpreter that has it,
Paddle is timed on the same cases in the same run; otherwise the figures the issue quotes for this
machine class are shown, marked "(quoted)".
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import spmdrules as sr

MESH_SHAPE = (2, 4)


@dataclass(frozen=True)
class Case:
    label: str
    op: str
    direction: str  # "forward" | "reverse"
    tensors: tuple[Any, ...]  # (shape, dims_mapping) or a list of them
    attrs: tuple[Any, ...]
    #: the issue's measurement of Paddle 3.3.1 on this machine class (None: none was quoted)
    paddle_us: float | None


CASES = (
    Case(
        "matmul x[4,1024,512] dm[0,-1,1] @ y[512,2048] dm[1,-1]",
        "matmul",
        "forward",
        (([4, 1024, 512], [0, -1, 1]), ([512, 2048], [1, -1])),
        (False, False),
        9.9,
    ),
    Case(
        "add x[8,128,1024] dm[0,-1,1] + y[1024]",
        "add",
        "forward",
        (([8, 128, 1024], [0, -1, 1]), ([1024], [-1])),
        (),
        7.6,
    ),
    Case(
        "reshape [8,128,1024] dm[0,-1,1] -> [8,128,16,64]",
        "reshape",
        "forward",
        (([8, 128, 1024], [0, -1, 1]),),
        ([8, 128, 16, 64],),
        7.0,
    ),
    Case(
        "layer_norm x[8,128,1024] dm[0,1,-1] + scale, bias; bna=2",
        "layer_norm",
        "forward",
        (([8, 128, 1024], [0, 1, -1]), ([1024], [-1]), ([1024], [-1])),
        (1e-5, 2),
        12.0,
    ),
    Case(
        "softmax x[8,16,128,128] dm[0,1,-1,-1], axis=-1",
        "softmax",
        "forward",
        (([8, 16, 128, 128], [0, 1, -1, -1]),),
        (-1,),
        6.3,
    ),
    Case(
        "concat 4 x [8,256,64] dm[0,-1,1], axis=1",
        "concat",
        "forward",
        ([([8, 256, 64], [0, -1, 1])] * 4,),
        (1,),
        28.5,
    ),
    Case(
        "embedding ids[8,512] dm[0,-1], weight[32000,1024] dm[-1,1]",
        "embedding",
        "forward",
        (([8, 512], [0, -1]), ([32000, 1024], [-1, 1])),
        (-1, False),
        7.6,
    ),
    Case(
        "matmul reverse from out[4,1024,2048] dm[0,-1,1]",
        "matmul",
        "reverse",
        (([4, 1024, 512], [-1, -1, -1]), ([512, 2048], [-1, -1]), ([4, 1024, 2048], [0, -1, 1])),
        (False, False),
        8.7,
    ),
    Case(
        "relu x[8,128,1024] dm[0,-1,1]", "relu", "forward", (([8, 128, 1024], [0, -1, 1]),), (), 6.2
    ),
    Case(
        "slice q[8,16,128,64] dm[0,1,-1,-1] to [..., 0:32] (RoPE)",
        "slice",
        "forward",
        (([8, 16, 128, 64], [0, 1, -1, -1]),),
        ([3], [0], [32], [1], []),
        None,
    ),
    Case(
        "gather table[32000,1024] dm[-1,1] at index[4096] dm[0]",
        "gather",
        "forward",
        (([32000, 1024], [-1, 1]), ([4096], [0])),
        (0,),
        None,
    ),
    Case(
        "where mask[8,1,128,128], x,y[8,16,128,128] dm[0,1,-1,-1]",
        "where",
        "forward",
        (([8, 1, 128, 128], [0, -1, -1, -1]), ([8, 16, 128, 128], [0, 1, -1, -1]),
         ([8, 16, 128, 128], [0, 1, -1, -1])),
        (),
        None,
    ),
    Case(
        "cumsum x[8,128,1024] dm[0,1,-1], axis=1 (sharded)",
        "cumsum",
        "forward",
        (([8, 128, 1024], [0, 1, -1]),),
        (1, False, False, False),
        None,
    ),
)


def _batch(case: Case) -> int:
    first = case.tensors[0][0] if isinstance(case.tensors[0], list) else case.tensors[0]
    return int(first[0][0])


def _specs(case: Case, mesh: sr.ProcessMesh, scale: int = 1) -> list[Any]:
    """The case's tensors on ``mesh``, with the batch dim (dim 0 of x) multiplied by ``scale``."""
    batch = _batch(case)

    def one(t: Any) -> sr.TensorSpec:
        shape = list(t[0])
        if shape and shape[0] == batch:
            shape[0] *= scale
        return sr.TensorSpec(shape, sr.DistAttr(mesh, t[1]))

    return [[one(t) for t in arg] if isinstance(arg, list) else one(arg) for arg in case.tensors]


def _attrs(case: Case, scale: int = 1) -> tuple[Any, ...]:
    """Attributes that spell out the batch size (reshape's target) follow the batch dim."""
    batch = _batch(case)
    return tuple(
        [a[0] * scale, *a[1:]] if isinstance(a, list) and a and a[0] == batch else a
        for a in case.attrs
    )


def _median_us(fn: Callable[[int], None], n: int, repeats: int) -> float:
    """Median per-call time; the cyclic GC is off while timing, as timeit does (both sides)."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn(n)
            samples.append((time.perf_counter() - t0) / n * 1e6)
        finally:
            gc.enable()
    return statistics.median(samples)


def time_ours(case: Case, n: int = 2000, repeats: int = 7) -> tuple[float, float]:
    rule = sr.get_rule(case.op)
    call = rule.infer_forward if case.direction == "forward" else rule.infer_reverse
    # Distinct meshes (shifted process ids) and batch sizes make every call a never-seen spec.
    fresh = [
        (
            *_specs(case, sr.ProcessMesh.from_shape(MESH_SHAPE, range(k * 8, k * 8 + 8)), k + 1),
            *_attrs(case, k + 1),
        )
        for k in range(n * repeats + 1)
    ]
    it = iter(fresh)

    def first(m: int) -> None:
        for _ in range(m):
            call(*next(it))

    first_us = _median_us(first, n, repeats)
    hot = _specs(case, sr.ProcessMesh.from_shape(MESH_SHAPE))
    call(*hot, *case.attrs)

    def repeat(m: int) -> None:
        for _ in range(m):
            call(*hot, *case.attrs)

    return first_us, _median_us(repeat, n, repeats)


_PADDLE_SNIPPET = r"""
import gc, json, statistics, sys, time, warnings
warnings.filterwarnings("ignore")
import paddle  # noqa: F401
import paddle.distributed as dist
from paddle.base.core import DistTensorSpec
from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
from paddle.framework import core
cases = json.loads(sys.stdin.read())
mesh = dist.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
def spec(t):
    a = TensorDistAttr(); a.process_mesh = mesh; a.dims_mapping = t[1]
    return DistTensorSpec(t[0], a)
out = []
for c in cases:
    rule = core.get_phi_spmd_rule(c["op"])
    args = [[spec(t) for t in a] if isinstance(a[0], list) and isinstance(a[0][0], list)
            else spec(a) for a in c["tensors"]] + list(c["attrs"])
    f = rule.infer_forward if c["direction"] == "forward" else rule.infer_backward
    f(*args)
    n, samples = 2000, []
    for _ in range(7):
        gc.collect()
        gc.disable()
        t0 = time.perf_counter()
        for _ in range(n):
            f(*args)
        samples.append((time.perf_counter() - t0) / n * 1e6)
        gc.enable()
    out.append(statistics.median(samples))
print(json.dumps(out))
"""


def time_paddle(python: str | None) -> list[float] | None:
    payload = json.dumps(
        [
            {"op": c.op, "direction": c.direction, "tensors": c.tensors, "attrs": c.attrs}
            for c in CASES
        ]
    )
    if python is None:
        try:
            import paddle  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            return None
        python = sys.executable
    res = subprocess.run(
        [python, "-c", _PADDLE_SNIPPET],
        input=payload,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if res.returncode != 0:
        print(f"paddle timing failed:\n{res.stderr[-2000:]}", file=sys.stderr)
        return None
    result: list[float] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--paddle-python", help="an interpreter with paddlepaddle==3.3.1 installed")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ns = ap.parse_args()
    paddle = time_paddle(ns.paddle_python)
    rows = []
    for i, case in enumerate(CASES):
        first, repeat = time_ours(case)
        ref = paddle[i] if paddle else case.paddle_us
        rows.append(
            {
                "case": case.label,
                "paddle_us": None if ref is None else round(ref, 2),
                "measured": bool(paddle),
                "first_us": round(first, 2),
                "repeat_us": round(repeat, 2),
                "first_ratio": None if ref is None else round(first / ref, 3),
                "repeat_ratio": None if ref is None else round(repeat / ref, 3),
            }
        )
    if ns.json:
        print(json.dumps(rows, indent=1))
        return 0
    src = "measured in this run" if paddle else "(quoted) from the issue"
    print(f"Paddle 3.3.1 C++ rules: {src}. Ratios = ours / Paddle (lower is better).")
    head = f"{'case':58s} {'paddle us':>9s} {'first us':>9s} {'ratio':>6s} {'repeat us':>9s} {'ratio':>6s}"
    print(head)
    print("-" * len(head))
    def num(v: float | None, width: int) -> str:
        return f"{v:{width}.2f}" if v is not None else f"{'-':>{width}s}"

    for r in rows:
        print(
            f"{r['case']:58s} {num(r['paddle_us'], 9)} {r['first_us']:9.2f} "
            f"{num(r['first_ratio'], 6)} {r['repeat_us']:9.2f} {num(r['repeat_ratio'], 6)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
