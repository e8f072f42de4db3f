"""Import, plan, completion and planning of a 32-layer LLaMA and of ResNet50-light, beside Paddle
3.3.1's PIR propagation of the same LLaMA, measured in the same run.

    .venv/bin/python bench/import.py [--paddle-python PATH] [--layers 32] [--hidden 256]
                                     [--repeat 3] [--fast-repeat 7] [--paddle-repeat 7]

The models (built or read, not run):

* LLaMA: transformers' LlamaForCausalLM with eager attention, ``--layers`` layers of the real
  LLaMA's structure (RMSNorm, GQA with RoPE, SwiGLU) at a small width (hidden 256, 8 heads, 4 KV
  heads, FFN 688, vocabulary 1024) so its random weights fit in memory: the op count, which is
  what the phases scale with, is the real model's (the width only changes the shapes). Batch 2,
  sequence 16, on a 2x2 (dp, mp) mesh with the Megatron plan of tests/support/hf_models.py.
  Phases: ``export`` (torch.export.export), ``decompose`` (run_decompositions to core ATen,
  ``matmul`` and ``linear`` kept whole: ``torch_import.decompose_program``), ``map`` (our
  mapping of the ExportedProgram onto registered ops).
* ResNet50-light: ``onnx/backend/test/data/light/light_resnet50.onnx`` of the installed onnx
  wheel at its batch of 1, H and W of the input split on a 2x2 (h, w) mesh with every Conv's
  spatial opt-in, as tests/importers/test_onnx_models.py runs it on 4 ranks. Phase ``import``
  (spmdrules.importers.onnx.import_model: the file read, our shape inference cross-checked
  against onnx's, the mapping onto registered ops).

Then for both: ``plan`` (spmdrules.plan.apply), ``complete`` (complete(g.reset_attrs()), from
the annotations alone), ``complete, new graph`` (the same on a graph just imported and planned,
untimed, before each run: completion's per-topology index is built every run, as for each new
model a compiler completes, while the process's caches are warm) and ``planning`` (every reshard
edge's plan, with the plan cache cleared first). The torch phases (export, decompose, map:
seconds each) run ``--repeat`` times, the others (well under a second) ``--fast-repeat`` times
(column ``n``). ``first`` is the first run
in this process (for ``complete``: the rules' memo caches and completion's per-topology index
empty for this graph), ``again`` the median of the other runs (warm caches, as in a compiler
that completes many graphs). Each is wall time (``perf_counter``) and this process's CPU time
(``process_time``): the machine is shared, and CPU time is the less disturbed figure. ``ops``
counts every op of our graph, constant sources (``full``, ``arange``) included; ``ops with an
input`` leaves those out.

Paddle. In Paddle 3.3.1's PIR, propagation happens as each op is built: an op with a dist operand
runs its phi SPMD rule forward and gives its results the answer (bench/paddle_pir.py explains
where, and what it times). Its whole-graph completion pass is a TODO in 3.3.1, so this per-op
forward propagation is all there is to compare with. bench/paddle_pir.py builds the same LLaMA
(same sizes, mesh and Megatron placements) as a static PIR program twice, with and without the
dist annotations, timing only the forward ops; Paddle's propagation time is the difference (the
median over ``--paddle-repeat`` repeats of the two builds side by side), so the Python API, op
creation and shape inference cancel. It runs under ``--paddle-python`` (or this
interpreter, if it has ``paddle``) in a subprocess with one thread (``OMP_NUM_THREADS=1``);
without either, Paddle is reported as not measured and no ratio is printed.

The ratio is our ``complete`` per op over Paddle's propagation per op (target: at most 0.2x),
with two op counts: every op of each program (Paddle's include the ``full_int_array`` of each
reshape's shape and the ``builtin.combine`` of each concat, which run no rule), and only the ops
that run a rule (ours: ops with an input; Paddle's: ops given an ``op_dist_attr`` that have an
operand). The work differs in kind: Paddle runs one forward rule per op, once, in build order and
settles nothing; ``complete`` propagates forward and backward to a fixed point, settles conflicts
by cost and records every decision's origin (docs/completion.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

#: the LLaMA's sizes other than its layers and width, shared with bench/paddle_pir.py
HEADS, KV_HEADS, VOCAB, BATCH, SEQ = 8, 4, 1024, 2, 16


def ffn_size(hidden: int) -> int:
    return int(hidden * 2.6875)


@dataclass
class Phase:
    model: str
    name: str
    runs: list[tuple[float, float]] = field(default_factory=list)  # (wall s, cpu s) per run

    def first(self) -> tuple[float, float]:
        return self.runs[0]

    def again(self) -> tuple[float, float] | None:
        rest = self.runs[1:]
        if not rest:
            return None
        return statistics.median(w for w, _ in rest), statistics.median(c for _, c in rest)


@dataclass
class Model:
    label: str
    ops: int
    ops_with_input: int
    summary: str
    phases: dict[str, Phase] = field(default_factory=dict)

    def timed(self, name: str, fn: Callable[[Any], Any], repeat: int,
              setup: Callable[[], Any] = lambda: None) -> Any:
        """Runs ``fn(setup())`` ``repeat`` times (``setup`` and a collection before each,
        untimed); the last result."""
        phase = self.phases.setdefault(name, Phase(self.label, name))
        out = None
        for _ in range(repeat):
            out = None
            arg = setup()
            gc.collect()
            t, c = time.perf_counter(), time.process_time()
            out = fn(arg)
            phase.runs.append((time.perf_counter() - t, time.process_time() - c))
        return out


def _counts(g: Any) -> tuple[int, int]:
    return g.num_ops, sum(1 for op in g.ops if any(t is not None for t in op.inputs))


def _complete_and_plan(m: Model, g: Any, mesh: Any, plan_spec: dict[str, Any], repeat: int,
                       rebuild: Callable[[], Any]) -> Any:
    """``plan``, ``complete`` (first and again on ``g``), ``complete, new graph`` (each run on a
    graph just made by ``rebuild`` and planned, untimed: the per-topology index is built every
    time, as for each model a compiler completes) and ``planning``."""
    from spmdrules import plan
    from spmdrules.completion import complete
    from spmdrules.completion.reshard_plans import plan_reshard

    def do_plan(_: Any) -> Any:
        for t in g.annotated():
            t.annotation = None
        return plan.apply(g, mesh, plan_spec)

    def new_graph() -> Any:
        fresh = rebuild()
        plan.apply(fresh, mesh, plan_spec)
        fresh.validate()
        return fresh

    m.timed("plan.apply", do_plan, repeat)
    result = m.timed("complete", lambda _: complete(g.reset_attrs()), repeat)
    m.timed("complete, new graph", complete, repeat, new_graph)

    def planning(_: Any) -> list[Any]:
        plan_reshard.cache_clear()
        return [e.plan(result.cost) for e in result.reshards]

    m.timed("planning (reshard plans)", planning, repeat)
    return result


def llama(layers: int, hidden: int, repeat: int, fast: int) -> Model:
    import torch
    from hf_models import LLAMA_PLAN, MESH
    from transformers import LlamaConfig, LlamaForCausalLM

    from spmdrules.importers import torch as torch_import

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=ffn_size(hidden),
                      num_hidden_layers=layers, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                      attn_implementation="eager", use_cache=False, bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    m = Model(f"llama{layers}", 0, 0, "")
    ep = m.timed("export (torch)", lambda _: torch.export.export(model, (ids,)), repeat)
    core = m.timed("decompose (torch)", lambda _: torch_import.decompose_program(ep), repeat)
    g = m.timed("map onto registered ops", lambda _: torch_import.from_exported(core),
                repeat).graph
    result = _complete_and_plan(m, g, MESH, LLAMA_PLAN, fast,
                                lambda: torch_import.from_exported(core).graph)
    m.ops, m.ops_with_input = _counts(g)
    m.summary = (f"LLaMA L={layers} hidden={hidden} (torch.export), 2x2 (dp, mp) Megatron plan: "
                 f"{m.ops} ops ({m.ops_with_input} with an input), {g.num_tensors} tensors, "
                 f"{len(g.annotated())} annotated, {len(result.reshards)} reshards, "
                 f"converged={result.converged}")
    return m


def resnet50(repeat: int) -> Model:
    import onnx

    import spmdrules as sr
    from spmdrules import plan
    from spmdrules.importers import onnx as onnx_import

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    m = Model("resnet50", 0, 0, "")
    def load(_: Any = None) -> Any:
        return onnx_import.import_model(path, spatial_sharding=True)

    im = m.timed("import (onnx file -> graph)", load, repeat)
    g = im.graph
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    result = _complete_and_plan(m, g, mesh, {im.inputs[0]: plan.Spatial(dims={"H": "h", "W": "w"})},
                                repeat, lambda: load().graph)
    m.ops, m.ops_with_input = _counts(g)
    m.summary = (f"ResNet50-light (onnx wheel, batch 1), 2x2 (h, w) spatial plan: {m.ops} ops "
                 f"({m.ops_with_input} with an input), {g.num_tensors} tensors, "
                 f"{len(result.reshards)} reshards, converged={result.converged}")
    return m


def paddle_pir(python: str | None, layers: int, hidden: int, repeat: int) -> tuple[Any, str]:
    """(bench/paddle_pir.py's JSON, "") or (None, why Paddle was not measured)."""
    if python is None:
        try:
            import paddle  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            return None, "no paddle importable here and no --paddle-python given"
        python = sys.executable
    cmd = [python, str(HERE / "paddle_pir.py"), "--layers", str(layers), "--hidden", str(hidden),
           "--heads", str(HEADS), "--kv-heads", str(KV_HEADS), "--ffn", str(ffn_size(hidden)),
           "--vocab", str(VOCAB), "--batch", str(BATCH), "--seq", str(SEQ),
           "--repeat", str(repeat)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "GLOG_minloglevel": "2"}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False,
                             env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{python} bench/paddle_pir.py failed: {e}"
    if res.returncode != 0:
        return None, f"{python} bench/paddle_pir.py exited {res.returncode}:\n{res.stderr[-2000:]}"
    return json.loads(res.stdout.strip().splitlines()[-1]), ""


def _table(models: list[Model]) -> None:
    head = (f"{'model':9s} {'phase':28s} {'n':>2s} {'first s':>8s} {'cpu s':>8s} {'again s':>8s} "
            f"{'cpu s':>8s} {'us/op 1st':>9s} {'us/op again':>11s}")
    print(head)
    print("-" * len(head))
    for m in models:
        for p in m.phases.values():
            (w1, c1), again = p.first(), p.again()
            a = f"{again[0]:8.4f} {again[1]:8.4f}" if again else f"{'-':>8s} {'-':>8s}"
            per = f"{again[0] / m.ops * 1e6:11.2f}" if again else f"{'-':>11s}"
            print(f"{m.label:9s} {p.name:28s} {len(p.runs):2d} {w1:8.4f} {c1:8.4f} {a} "
                  f"{w1 / m.ops * 1e6:9.2f} {per}")


def _ratios(ours: Model, pd: dict[str, Any]) -> None:
    plain, dst = pd["plain"], pd["dist"]
    prop_w, prop_c = pd["propagation"]["wall"], pd["propagation"]["cpu"]
    n_all, n_rule = dst["ops"], dst["ops_spmd"]
    print(f"\nPaddle {pd['paddle']} PIR propagation, measured in this run (bench/paddle_pir.py, the "
          f"same LLaMA L={pd['layers']}; medians of {pd['repeat']} repeats, one thread):")
    print(f"  forward built without dist attributes: {plain['wall']:.4f} s wall, "
          f"{plain['cpu']:.4f} s cpu, {plain['ops']} ops")
    print(f"  forward built with dist attributes:    {dst['wall']:.4f} s wall, "
          f"{dst['cpu']:.4f} s cpu, {n_all} ops, {n_rule} of them ran an SPMD rule")
    print(f"  propagation (with - without, paired):  {prop_w:.4f} s wall, {prop_c:.4f} s cpu; "
          f"logits {pd['logits']}")
    if prop_w <= 0 or prop_c <= 0:
        print("  propagation time not positive: below the noise of this run, no ratio printed")
        return
    comp = ours.phases["complete"]
    new = ours.phases["complete, new graph"]
    plan = ours.phases["planning (reshard plans)"]
    rows: list[tuple[str, tuple[float, float]]] = [("complete, first run", comp.first())]
    again, plan_again = comp.again(), plan.again()
    rows.append(("complete, new graph", (statistics.median(w for w, _ in new.runs),
                                         statistics.median(c for _, c in new.runs))))
    if again is not None and plan_again is not None:
        rows.append(("complete, again", again))
        rows.append(("complete + planning, again",
                     (again[0] + plan_again[0], again[1] + plan_again[1])))
    print(f"\nus/op: ours over our {ours.ops} ops ({ours.ops_with_input} with an input); "
          f"Paddle's propagation over its {n_all} ops ({n_rule} ran a rule).")
    print(f"  Paddle propagation      all ops: {prop_w / n_all * 1e6:6.2f} us wall "
          f"{prop_c / n_all * 1e6:6.2f} us cpu;  ops running a rule: "
          f"{prop_w / n_rule * 1e6:6.2f} us wall {prop_c / n_rule * 1e6:6.2f} us cpu")
    print("ratio = ours per op / Paddle's per op (target: at most 0.2x)")
    head = (f"  {'ours':28s} {'all ops: wall':>13s} {'cpu':>7s}   {'ops running a rule: wall':>24s} "
            f"{'cpu':>7s}   {'whole model: wall':>17s} {'cpu':>7s}")
    print(head)
    for name, (w, c) in rows:
        r_all = (w / ours.ops) / (prop_w / n_all), (c / ours.ops) / (prop_c / n_all)
        r_rule = ((w / ours.ops_with_input) / (prop_w / n_rule),
                  (c / ours.ops_with_input) / (prop_c / n_rule))
        print(f"  {name:28s} {r_all[0]:12.3f}x {r_all[1]:6.3f}x   {r_rule[0]:23.3f}x "
              f"{r_rule[1]:6.3f}x   {w / prop_w:16.3f}x {c / prop_c:6.3f}x")
    print("  (whole model: our time for the graph over Paddle's propagation time for its program)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--paddle-python", help="an interpreter with paddlepaddle==3.3.1 installed")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the torch phases")
    ap.add_argument("--fast-repeat", type=int, default=7,
                    help="runs of the other phases (each well under a second)")
    ap.add_argument("--paddle-repeat", type=int, default=7,
                    help="repeats of Paddle's two builds (each well under a second)")
    args = ap.parse_args()

    models = [llama(args.layers, args.hidden, args.repeat, args.fast_repeat),
              resnet50(args.fast_repeat)]
    for m in models:
        print(m.summary)
    print("(first: the first run in this process; again: the median of the other n - 1 runs; "
          "us/op over all the graph's ops)")
    _table(models)
    pd, why = paddle_pir(args.paddle_python, args.layers, args.hidden, args.paddle_repeat)
    if pd is None:
        print(f"\nPaddle's PIR propagation: not measured ({why}); no ratio.")
        return
    _ratios(models[0], pd)


if __name__ == "__main__":
    main()
