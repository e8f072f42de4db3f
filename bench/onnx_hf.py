"""Hugging Face models through ONNX: each model of tests/support/hf_onnx.py (the decoders of
hf_models.py, BERT, RoBERTa, ViT, T5, BART; tiny configs, random weights) exported by
``torch.onnx.export`` (the TorchScript exporter; ``--dynamo`` for the dynamo one), imported by
``spmdrules.importers.onnx``, its inputs' batch split on dp over a 2x2 (dp x mp) mesh,
completed, lowered and run on the simulated mesh. Per model: the stage reached (export,
import, run), the op count, the largest error of the sharded run against onnx.reference (where
the reference evaluator runs the model) and against torch, and for a model that does not
import, the error. Then every op type of the exported models that no converter maps, with its
count (a node computed at import from constants needs none).

    .venv/bin/python bench/onnx_hf.py [--dynamo] [MODEL ...]
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import hf_onnx
from hf_models import MESH

from spmdrules import plan
from spmdrules.completion import complete
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import run_simulated
from spmdrules.importers import onnx as onnx_import
from spmdrules.importers.onnx_graph import OPS


def reference(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray | None:
    """onnx.reference's output, or None where the evaluator fails on the model (onnx 1.23's
    GatherElements does on BERT's and RoBERTa's token types)."""
    from onnx.reference import ReferenceEvaluator

    try:
        return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
    except Exception:
        return None


def data_parallel(im: onnx_import.Imported, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The imported graph with every input's batch on dp, run on the simulated 2x2 mesh."""
    plan.apply(im.graph, MESH, {name: plan.DataParallel(dim="dp") for name in im.inputs})
    done = complete(im.graph)
    res = run_simulated(lower(done), {**im.values, **feeds})
    return np.asarray(res.fetch(im.outputs[0]))


def row(kind: str, dynamo: bool, unmapped: collections.Counter[str]) -> str:
    t0 = time.perf_counter()
    module = hf_onnx.model(kind)
    try:
        model = hf_onnx.export(kind, module, dynamo=dynamo)
    except Exception as e:
        return f"| {kind} | no | - | - | - | - | export: {type(e).__name__}: {str(e)[:120]} |"
    unmapped.update(n.op_type for n in model.graph.node if n.op_type not in OPS)
    feeds = hf_onnx.inputs(kind)
    try:
        im = onnx_import.import_model(model)
    except Exception as e:
        return f"| {kind} | yes | no | - | - | - | import: {type(e).__name__}: {str(e)[:160]} |"
    try:
        got = data_parallel(im, feeds)
    except Exception as e:
        return (f"| {kind} | yes | yes | {len(im.graph.ops)} | - | - | run: "
                f"{type(e).__name__}: {str(e)[:160]} |")
    want = hf_onnx.torch_output(kind, module)
    ref = reference(model, feeds)
    vs_ref = "fails" if ref is None else f"{float(np.abs(got - ref).max()):.1e}"
    return (f"| {kind} | yes | yes | {len(im.graph.ops)} | {vs_ref} | "
            f"{float(np.abs(got - want).max()):.1e} | {time.perf_counter() - t0:.0f} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(hf_onnx.MODELS))
    ap.add_argument("--dynamo", action="store_true", help="torch.onnx.export(dynamo=True)")
    args = ap.parse_args()
    unmapped: collections.Counter[str] = collections.Counter()
    print("| model | exported | imported | ops | dp 2x2 vs onnx.reference | dp 2x2 vs torch "
          "| time or error |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.models:
        print(row(kind, args.dynamo, unmapped), flush=True)
    print("\nop types without a converter (count over the exported models; those computed at "
          "import from constants need none):")
    print(", ".join(f"{op} {n}" for op, n in unmapped.most_common()) or "none")


if __name__ == "__main__":
    main()
