"""Auto-sharding against hand plans, side by side in one run (issue 27).

    .venv/bin/python bench/auto.py [--models llama,mixtral,resnet18,unet] [--devices 4 8]
        [--solve-layers 32] [--mpi [--mpi-timeout 1200]] [--calibrate [--write]]

For each model and device count, at a loose budget (64 GiB per rank) and a tight one, it prints
the step time and per-rank memory ``spmdrules.auto.plan`` predicts for its plan beside those of
the hand plans, each estimated the same way (``auto.evaluate``: the plan applied, completed,
and the completion priced by the cost model, docs/auto.md). The tight budget is the issue's "a
model that does not fit replicated": halfway between the memory per rank of the leanest plan
(``auto.plan(..., objective="memory")``) and data parallelism's, which replicates every weight;
so data parallelism is over it and some plan is not. Beside the auto plan, ``splits`` says
what it divides: the batch (an input split), the weights (how many of the parameters are split),
and the experts (how many tensors of the completed plan are masked pending sums: each token's
expert weights on the process that holds its expert).

* **dp**: the batch over every process (1-D mesh);
* **megatron** (decoders): the model's Megatron plan (tests/support/hf_models.py) on a 1-D mesh
  of every process, the batch replicated; **megatron+dp**: the same plan on a 2 x n/2 mesh, the
  batch on dp;
* **spatial** (CNNs): H over every process; **dp+spatial**: the batch over 2, H over n/2.

A hand plan that cannot be applied or completed prints its one-line reason; one over the budget
is marked ``over``. ``auto/best`` is the auto plan's predicted time over the fastest hand plan
that fits. Then the wall time of ``auto.plan`` for a ``--solve-layers``-layer LLaMA (hidden 256,
imported by torch.export) on 8 devices, the issue's target being at most 10 s.

``--mpi`` runs each auto plan and each hand plan that fits the budget (in float64 if the
processes' predicted memory together is below ``MPI_MEMORY``, in float32 up to twice that: this
machine has 23 GB), on as many MPI ranks as its mesh has
processes (``mpiexec``, oversubscribed; the tests' harness, tests/support/sharded_runs.py
``run_against_serial``): the model's own weights and input in float64, its output seeded with
a random cotangent, the gradient program (forward and reverse) run once. It prints, under the
plan, ``mpi fwd/grad max err`` (the output and every gradient against serial numpy's forward
and reverse mode, relative to each tensor's scale) and ``bytes measured/planned`` (the bytes
the runtime counted on every reshard edge and halo exchange, forward and reverse, against what
the plans predict; beside them the bytes of ops' own all-reduces, such as a replicated
weight's gradient under data parallelism, which no plan predicts). A plan met twice (the same
annotations at both budgets) runs once. An error above ``MPI_TOL``, an edge whose bytes differ
from its plan, or a plan that cannot be lowered or run is printed ``!!! MPI MISMATCH !!!``,
listed again at the end, and the script exits 1. ``--mpi-timeout`` bounds each job.

``--calibrate`` measures this machine's compute rates per process (one BLAS thread: a rank
has one core) and prints them; ``--write`` stores them in spmdrules/auto/calibration.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # a rank's rate: one thread, before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import contextlib
import datetime
import json
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import spmdrules as sr
from spmdrules import auto, plan
from spmdrules.auto.cost import CALIBRATION_FILE
from spmdrules.completion.reshard_plans import fmt_bytes
from spmdrules.completion.result import DroppedSplitWarning

LOOSE = 64 << 30
BATCH, SEQ, IMAGE = 8, 32, 32
#: ``--mpi``: the largest relative error (float64 data) still equal to serial
MPI_TOL = 1e-10
#: ``--mpi``: a plan runs in float64 only if its processes' predicted memory, together, is
#: below this (in float64 a rank held up to 4x its float32 prediction: a Mixtral plan that holds
#: every token copy's expert weights on every rank, 1.5 GB predicted, was killed for memory at
#: 5.8 GB on this 23 GB machine); up to twice this it runs in float32, against the same float64
#: serial reference within ``MPI_TOL_FLOAT32``; above, it is not run
MPI_MEMORY = 4 << 30
#: ``--mpi``: the largest relative error of a float32 run against the float64 serial reference
MPI_TOL_FLOAT32 = 1e-4


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> sr.ProcessMesh:
    return sr.ProcessMesh.from_shape(shape, dim_names=names)


@dataclass(frozen=True)
class Model:
    """An imported model: its name (the bench's kind), its graph, the value of every source
    (its own weights and the example input, floats as float64 for the MPI check) and the
    tensor it returns."""

    name: str
    graph: Any
    feeds: dict[str, np.ndarray]
    output: str


def _imported(name: str, module: Any, x: Any, **kw: Any) -> Model:
    from spmdrules.importers import torch as torch_import

    im = torch_import.export(module, (x,), **kw)
    feeds = {k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
             for k, v in im.feeds(x).items()}
    return Model(name, im.graph, feeds, im.outputs[0])


def _decoder(kind: str, layers: int = 2) -> tuple[Model, dict[str, Any]]:
    import torch
    from hf_models import DECODERS, SIZES, decoder

    ids = torch.randint(0, SIZES["vocab"], (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    return _imported(kind, decoder(kind, layers=layers), ids), DECODERS[kind][1]


def _cnn(kind: str) -> Model:
    import torch
    from cnn_models import resnet18, unet

    x = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))
    module = resnet18() if kind == "resnet18" else unet()
    return _imported(kind, module, x, spatial_sharding=True)


class MpiRuns:
    """``--mpi``: each plan run on as many MPI ranks as its mesh has processes, forward and
    gradients against serial numpy, bytes against the plan's; a plan met twice (the same
    model and annotations at both budgets) runs once. Every failure is kept for the exit status."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.failures: list[str] = []
        self._done: dict[tuple[str, str, str], str] = {}
        #: per model, its serial run (forward values, cotangents): every plan's reference
        self._serial: dict[str, Any] = {}

    def cell(self, what: str, model: Model, mesh: sr.ProcessMesh, styles: dict[str, Any],
             float32: bool = False) -> str:
        """The plan's MPI columns (``what`` names it in a failure); ``float32``: the run's data
        in float32, checked against the float64 reference within ``MPI_TOL_FLOAT32``."""
        key = (model.name, json.dumps([list(mesh.shape), list(mesh.dim_names)]),
               json.dumps({k: repr(v) for k, v in sorted(styles.items())}), str(float32))
        if key not in self._done:
            self._done[key] = self._run(what, model, mesh, styles, float32)
        return self._done[key]

    def _run(self, what: str, model: Model, mesh: sr.ProcessMesh, styles: dict[str, Any],
             float32: bool) -> str:
        from sharded_runs import run_against_serial, serial_reference

        from spmdrules.execution.adjoint import gradient_program
        from spmdrules.execution.lowering import lower

        g = model.graph
        t0 = time.perf_counter()
        try:
            with _completed(g, mesh, styles) as r:
                prog = lower(r)
            out = model.output
            gp = gradient_program(prog, [out])
            seed = np.random.default_rng(0).standard_normal(prog.buffers[out].shape)
            if model.name not in self._serial:  # the same sources and seed for every plan
                self._serial[model.name] = serial_reference(g, model.feeds, {out: seed},
                                                            keep=[out])
            # float32 values are exactly the float64 reference's sources (imported as float32)
            feeds = {k: _as(v, float32) for k, v in {**model.feeds, gp.seeds[out]: seed}.items()}
            check = run_against_serial(g, prog, gp, feeds, {out: seed}, nprocs=mesh.size,
                                       timeout=self.timeout, fetch=[out],
                                       serial=self._serial[model.name])
        except sr.SpmdError as e:
            return self._fail(what, f"failed: {str(e).splitlines()[0][:120]}")
        cell = (f"mpi fwd/grad max err {check.forward_error:.1e}/{check.gradient_error:.1e}, "
                f"bytes measured/planned {fmt_bytes(check.measured_bytes)}/"
                f"{fmt_bytes(check.planned_bytes)} (+{fmt_bytes(check.internal_bytes)} "
                f"in ops' own all-reduces; {time.perf_counter() - t0:.0f} s"
                f"{'; float32' if float32 else ''})")
        problems = check.problems(MPI_TOL_FLOAT32 if float32 else MPI_TOL)
        if problems:
            return self._fail(what, f"{cell}\n      " + "\n      ".join(problems[:8]))
        return cell

    def _fail(self, what: str, why: str) -> str:
        self.failures.append(f"{what}: {why}")
        return f"!!! MPI MISMATCH !!! {why}"


def _as(v: np.ndarray, float32: bool) -> np.ndarray:
    return v.astype(np.float32) if float32 and np.issubdtype(v.dtype, np.floating) else v


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


def bench_model(kind: str, devices: list[int], opts: auto.Options, mpi: MpiRuns | None
                ) -> None:
    if kind in ("resnet18", "unet"):
        model, megatron = _cnn(kind), None
    else:
        model, megatron = _decoder(kind)
    g = model.graph
    for n in devices:
        hands: dict[str, auto.Estimate | str] = {}
        plans = hand_plans(kind, g, n, megatron)
        for name, (mesh, styles) in plans.items():
            try:
                hands[name] = auto.evaluate(g, mesh, styles, opts)
            except sr.SpmdError as e:
                hands[name] = str(e).splitlines()[0][:70]
        budgets = [("loose", LOOSE, "")]
        dp = hands.get("dp")
        if isinstance(dp, auto.Estimate):
            tight, lean = tight_budget(g, n, dp, opts)
            budgets.append(("tight", tight,
                            f" (halfway from the leanest plan's {fmt_bytes(lean)} to dp's)"))
        for label, budget, why in budgets:
            print(f"\n{kind} on {n} devices, {label} budget {fmt_bytes(budget)}/rank{why}")
            fits = {k: e for k, e in hands.items()
                    if isinstance(e, auto.Estimate) and e.memory_bytes <= budget}
            for name, e in hands.items():
                what = (_line(e) + ("" if name in fits else "  over")
                        if isinstance(e, auto.Estimate) else e)
                if mpi is not None and name in fits:
                    what += "  " + _mpi_cell(mpi, f"{kind} {n} {name}", model, *plans[name],
                                             fits[name])
                print(f"  {name:<12} {what}", flush=True)
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
                  f"{rows} rows)\n  {'':<12} splits {splits(g, p)}", flush=True)
            if mpi is not None:
                cell = _mpi_cell(mpi, f"{kind} {n} auto ({label})", model, p.mesh, p,
                                 p.predicted)
                print(f"  {'':<12} {cell}", flush=True)


def tight_budget(g: Any, n: int, dp: auto.Estimate, opts: auto.Options) -> tuple[int, int]:
    """The tight budget on ``n`` devices (module docs) and the leanest plan's memory per rank."""
    lean = auto.plan(g, n, memory_per_rank=LOOSE, objective="memory",
                     options=opts).predicted.memory_bytes
    return (lean + dp.memory_bytes) // 2, lean


@contextlib.contextmanager
def _completed(g: Any, mesh: sr.ProcessMesh, styles: dict[str, Any]) -> Iterator[Any]:
    """``g`` annotated by ``styles`` alone on ``mesh`` and completed; afterwards its
    annotations and attributes are as they were (as ``auto.evaluate`` leaves them)."""
    from spmdrules.completion import complete

    saved = [(t, t.annotation, t.attr) for t in g.tensors]
    try:
        for t in g.tensors:
            t.annotation = None
        plan.apply(g, mesh, styles)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DroppedSplitWarning)
            yield complete(g)
    finally:
        for t, ann, attr in saved:
            t.annotation, t.attr = ann, attr


def splits(g: Any, p: auto.AutoPlan) -> str:
    """What the plan divides: the batch, the weights, the experts (module docs)."""

    def split(name: str) -> bool:
        style = p.get(name)
        return style is not None and any(d is not None for d in style.style.spec)

    params = g.params
    batch = [t.name for t in g.inputs if split(t.name)]
    with _completed(g, p.mesh, p) as r:
        masked = sum(1 for t in g.tensors if r.attr(t).mask_items)
    return (f"batch {'yes' if batch else 'no'}, weights {sum(map(split, (t.name for t in params)))}"
            f"/{len(params)}, experts {'yes' if masked else 'no'} ({masked} masked tensors)")


def _mpi_cell(mpi: MpiRuns, what: str, model: Model, mesh: sr.ProcessMesh,
              styles: dict[str, Any], e: auto.Estimate) -> str:
    if e.memory_bytes * mesh.size > 2 * MPI_MEMORY:
        return (f"mpi not run: {mesh.size} x {fmt_bytes(e.memory_bytes)} is over "
                f"{fmt_bytes(2 * MPI_MEMORY)}")
    return mpi.cell(what, model, mesh, styles, e.memory_bytes * mesh.size > MPI_MEMORY)


def bench_solve(layers: int, devices: int, opts: auto.Options) -> None:
    t0 = time.perf_counter()
    g = _decoder("llama", layers=layers)[0].graph
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
    ap.add_argument("--mpi", action="store_true",
                    help="run every plan on MPI against serial (forward, gradients, bytes)")
    ap.add_argument("--mpi-timeout", type=float, default=1200.0,
                    help="seconds per MPI job (default 1200)")
    args = ap.parse_args(argv)
    if args.calibrate:
        calibrate(args.write)
        return
    opts = auto.Options()
    mpi = MpiRuns(args.mpi_timeout) if args.mpi else None
    for kind in filter(None, args.models.split(",")):  # --models "" runs the solve alone
        bench_model(kind, args.devices, opts, mpi)
    if args.solve_layers:
        bench_solve(args.solve_layers, 8, opts)
    if mpi is not None and mpi.failures:
        print(f"\n!!! {len(mpi.failures)} plan(s) differ on MPI from serial or from their "
              "plans' bytes:", *mpi.failures, sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
