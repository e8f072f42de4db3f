"""Import, plan, completion and planning of a 32-layer LLaMA built from a config (not run).

    .venv/bin/python bench/import.py [--layers 32] [--hidden 256] [--repeat 3]

The model is transformers' LlamaForCausalLM with eager attention, 32 layers of the real LLaMA's
structure (RMSNorm, GQA with RoPE, SwiGLU) at a small width (hidden 256, 8 heads, 4 KV heads,
FFN 688, vocabulary 1024) so its random weights fit in memory: the op count, which is what the
phases scale with, is the real model's (the width only changes the shapes). Batch 2, sequence 16,
on a 2x2 (dp, mp) mesh with the Megatron plan of tests/support/hf_models.py.

Phases, each the median of ``--repeat`` runs: ``export`` (torch.export.export),
``decompose`` (run_decompositions to core ATen), ``map`` (our mapping of the ExportedProgram onto
registered ops), ``plan`` (plan.apply), ``complete`` (complete(), from the annotations) and
``planning`` (every reshard edge's plan). Paddle's PIR propagation is not timed here (see the
report of issue 13: not done).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))


def _median(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import torch
    from hf_models import LLAMA_PLAN, MESH
    from transformers import LlamaConfig, LlamaForCausalLM

    from spmdrules import plan
    from spmdrules.completion import complete
    from spmdrules.importers import torch as torch_import

    torch.manual_seed(0)
    h = args.hidden
    cfg = LlamaConfig(vocab_size=1024, hidden_size=h, intermediate_size=int(h * 2.6875),
                      num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
                      max_position_embeddings=64, attn_implementation="eager", use_cache=False,
                      bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 1024, (2, 16))
    rows: list[tuple[str, float]] = []
    t_export, ep = _median(lambda: torch.export.export(model, (ids,)), args.repeat)
    rows.append(("export (torch)", t_export))
    t_dec, core = _median(lambda: ep.run_decompositions(), args.repeat)
    rows.append(("decompose (torch)", t_dec))
    t_map, imported = _median(lambda: torch_import.from_exported(core), args.repeat)
    rows.append(("map onto registered ops", t_map))
    g = imported.graph

    def do_plan() -> Any:
        for t in g.annotated():
            t.annotation = None
        return plan.apply(g, MESH, LLAMA_PLAN)

    t_plan, _ = _median(do_plan, args.repeat)
    rows.append(("plan.apply", t_plan))
    t_complete, result = _median(lambda: complete(g.reset_attrs()), args.repeat)
    rows.append(("complete", t_complete))
    t_planning, plans = _median(lambda: [e.plan(result.cost) for e in result.reshards],
                                args.repeat)
    rows.append(("planning (reshard plans)", t_planning))
    n = g.num_ops
    print(f"LLaMA L={args.layers} hidden={h}: {n} ops, {g.num_tensors} tensors, "
          f"{len(g.annotated())} annotated, {len(plans)} reshards, converged={result.converged}")
    print(f"{'phase':28s} {'s':>9s} {'us/op':>9s}")
    for name, s in rows:
        print(f"{name:28s} {s:9.4f} {s / n * 1e6:9.1f}")


if __name__ == "__main__":
    main()
