"""Auto-sharding against hand plans, side by side in one run (issue 27).

    .venv/bin/python bench/auto.py [--models llama,mixtral,resnet18,unet] [--devices 4 8]
        [--solve-layers 32] [--calibrate [--write]]

For each model and device count, at a loose budget (64 GiB per rank) and a tight one (60% of
what data parallelism needs: the model does not fit replicated), it prints the step time and
per-rank memory ``spmdrules.auto.plan`` predicts for its plan beside those of the hand plans,
each estimated the same way (``auto.evaluate``: the plan applied, completed, and the
completion priced by the cost model, docs/auto.md):

* **dp**: the batch over every process (1-D mesh);
* **megatron** (decoders): the model's Megatron plan (tests/support/hf_models.py) on a 1-D mesh
  of every process, the batch replicated; **megatron+dp**: the same plan on a 2 x n/2 mesh, the
  batch on dp;
* **spatial** (CNNs): H over every process; **dp+spatial**: the batch over 2, H over n/2.

A hand plan that cannot be applied or completed prints its one-line reason; one over the budget
is marked ``over``. ``auto/best`` is the auto plan's predicted time over the fastest hand plan
that fits. Then the wall time of ``auto.plan`` for a ``--solve-layers``-layer LLaMA (hidden 256,
imported by torch.export) on 8 devices, the issue's target being at most 10 s.

``--calibrate`` measures this machine's compute rates per process (one BLAS thread: a rank
has one core) and prints them; ``--write`` stores them in spmdrules/auto/calibration.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # a rank's rate: one thread, before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import datetime
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import spmdrules as sr
from spmdrules import auto, plan
from spmdrules.auto.cost import CALIBRATION_FILE
from spmdrules.completion.reshard_plans import fmt_bytes

LOOSE = 64 << 30
TIGHT_FRACTION = 0.6
BATCH, SEQ, IMAGE = 8, 32, 32


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> sr.ProcessMesh:
    return sr.ProcessMesh.from_shape(shape, dim_names=names)


def _decoder(kind: str, layers: int = 2) -> tuple[Any, dict[str, Any]]:
    import torch
    from hf_models import DECODERS, SIZES, decoder

    from spmdrules.importers import torch as torch_import

    ids = torch.randint(0, SIZES["vocab"], (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    g = torch_import.export(decoder(kind, layers=layers), (ids,)).graph
    return g, DECODERS[kind][1]


def _cnn(kind: str) -> Any:
    import torch
    from cnn_models import resnet18, unet

    from spmdrules.importers import torch as torch_import

    x = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))
    module = resnet18() if kind == "resnet18" else unet()
    return torch_import.export(module, (x,), spatial_sharding=True).graph


def hand_plans(kind: str, g: Any, n: int, megatron: dict[str, Any] | None
               ) -> dict[str, tuple[sr.ProcessMesh, dict[str, Any]]]:
    data = "input_ids" if megatron is not None else "x"
    out = {"dp": (_mesh((n,), ("dp",)), {data: plan.DataParallel(dim="dp")})}
    if megatron is not None:
        tp_only = {k: v for k, v in megatron.items() if k != "input_ids"}
        out["megatron"] = (_mesh((n,), ("mp",)), tp_only)
        out["megatron+dp"] = (_mesh((2, n // 2), ("dp", "mp")), megatron)
    else:
        out["spatial"] = (_mesh((n,), ("h",)), {"x": plan.Spatial(dims={"H": "h"})})
        out["dp+spatial"] = (_mesh((2, n // 2), ("dp", "h")),
                             {"x": plan.Spec(("dp", None, "h", None))})
    return out


def _line(e: auto.Estimate) -> str:
    return f"{e.time * 1e3:9.3f} ms {fmt_bytes(e.memory_bytes):>9}"


def bench_model(kind: str, devices: list[int], opts: auto.Options) -> None:
    if kind in ("resnet18", "unet"):
        g, megatron = _cnn(kind), None
    else:
        g, megatron = _decoder(kind)
    for n in devices:
        hands: dict[str, auto.Estimate | str] = {}
        for name, (mesh, styles) in hand_plans(kind, g, n, megatron).items():
            try:
                hands[name] = auto.evaluate(g, mesh, styles, opts)
            except sr.SpmdError as e:
                hands[name] = str(e).splitlines()[0][:70]
        dp = hands.get("dp")
        base = dp.memory_bytes if isinstance(dp, auto.Estimate) else LOOSE
        for label, budget in (("loose", LOOSE), ("tight", int(base * TIGHT_FRACTION))):
            print(f"\n{kind} on {n} devices, {label} budget {fmt_bytes(budget)}/rank")
            fits = {k: e for k, e in hands.items()
                    if isinstance(e, auto.Estimate) and e.memory_bytes <= budget}
            for name, e in hands.items():
                what = (_line(e) + ("" if name in fits else "  over")
                        if isinstance(e, auto.Estimate) else e)
                print(f"  {name:<12} {what}")
            t0 = time.perf_counter()
            try:
                p = auto.plan(g, n, memory_per_rank=budget, options=opts)
            except sr.SpmdError as e:
                print(f"  {'auto':<12} {str(e).splitlines()[0][:100]}")
                continue
            solve = time.perf_counter() - t0
            best = min(fits.items(), key=lambda kv: kv[1].time, default=None)
            ratio = f"{p.predicted.time / best[1].time:.3f} vs {best[0]}" if best else "n/a"
            v, rows = p.chosen.program
            print(f"  {'auto':<12} {_line(p.predicted)}  mesh {list(p.mesh.shape)}, "
                  f"auto/best {ratio}, solved in {solve:.1f} s (MILP {v} variables, "
                  f"{rows} rows)")


def bench_solve(layers: int, devices: int, opts: auto.Options) -> None:
    t0 = time.perf_counter()
    g, _ = _decoder("llama", layers=layers)
    imported = time.perf_counter() - t0
    t0 = time.perf_counter()
    p = auto.plan(g, devices, memory_per_rank=LOOSE, options=opts)
    solve = time.perf_counter() - t0
    print(f"\nLLaMA, {layers} layers ({g.num_ops} ops), {devices} devices: auto.plan "
          f"{solve:.1f} s (target <= 10 s; import {imported:.1f} s), mesh "
          f"{list(p.mesh.shape)}, step {p.predicted.time * 1e3:.3f} ms")


def _rate(fn: Callable[[], object], work: float) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return work / float(np.median(times))


def calibrate(write: bool) -> None:
    n = 512
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    x = np.random.default_rng(1).random(1 << 22, dtype=np.float32)
    data = {"matmul_flops_per_s": _rate(lambda: a @ a, 2.0 * n ** 3),
            "elementwise_per_s": _rate(lambda: x + x, 3.0 * x.size),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
            "date": datetime.date.today().isoformat(),
            "command": "python bench/auto.py --calibrate --write"}
    print(json.dumps(data, indent=2))
    _row_ops(x.reshape(4096, 1024))
    if write:
        CALIBRATION_FILE.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {CALIBRATION_FILE}")


def _row_ops(x: np.ndarray) -> None:
    """The time per element the cost model counts (operands' and results' elements) of ops it
    prices at the elementwise rate, over ``x + x``'s, each timed beside ``x + x`` in turn (a
    load hits both): a row's reduction, and softmax, which the rate does not see apart
    (docs/auto.md, "Limits")."""
    n = x.size

    def softmax() -> object:
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    ops: dict[str, tuple[Callable[[], object], int]] = {
        "relu": (lambda: np.maximum(x, 0), 2 * n), "exp": (lambda: np.exp(x), 2 * n),
        "row sum": (lambda: x.sum(-1, keepdims=True), n + x.shape[0]),
        "softmax": (softmax, 2 * n)}
    for name, (fn, counted) in ops.items():
        ratios = []
        for _ in range(15):
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            _ = x + x
            t2 = time.perf_counter()
            ratios.append((t1 - t0) / counted / ((t2 - t1) / (3 * n)))
        print(f"{name:<8} {float(np.median(ratios)):6.2f} x the elementwise time per element")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama,mixtral,resnet18,unet")
    ap.add_argument("--devices", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--solve-layers", type=int, default=32)
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    if args.calibrate:
        calibrate(args.write)
        return
    opts = auto.Options()
    for kind in filter(None, args.models.split(",")):  # --models "" runs the solve alone
        bench_model(kind, args.devices, opts)
    if args.solve_layers:
        bench_solve(args.solve_layers, 8, opts)


if __name__ == "__main__":
    main()
