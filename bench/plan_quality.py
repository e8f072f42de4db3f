"""Plan quality: the forward bytes and collectives of our completed plan, beside the textbook
layout's and DTensor's for the same model and plan, in one run (issue 24).

    .venv/bin/python bench/plan_quality.py [--models llama,gpt2,...] [--batch 2 4] [--json]

Every figure is the forward's, in our convention (``spmdrules.completion.planning``): the bytes
every process sends, with ring algorithms, summed over all processes; a collective's bytes per
process in a group of n: all-reduce 2(n-1)/n x its block, all-gather (n-1)/n x the gathered
block, reduce-scatter and all-to-all (n-1)/n x the block sent. The mesh is 2x2 (dp x mp).

The models: the Hugging Face decoders of tests/support/hf_models.py (``DECODERS``: random
weights, no download, seq 32, hidden 256, 8 heads, 4 KV heads, FFN 512, vocabulary 512,
2 layers, fp32, LM head untied, **eager attention**: the importer maps eager attention's
matmuls and softmax, not sdpa's fused kernel), each with its Megatron plan written once, as data,
and read by both sides; then a ResNet-18 and a small U-Net written in torch
(tests/support/cnn_models.py) with the batch on dp and H on mp.

Columns:

* **ours**: ``spmdrules.importers.torch.export``, ``plan.apply`` with the plan, ``complete``
  (a CNN enters through ONNX: torch's TorchScript exporter, then ``importers.onnx`` with every
  Conv's spatial opt-in, as the torch importer maps no ``aten.convolution`` today);
  the bytes are ``sum(p.total_bytes for p in result.plans())``, the collectives every step of
  those plans that moves data (a local slice or a zero-partial moves none).
* **textbook**: a formula per model kind, from the config and the plan:

  - *dense decoder*: the embedding's pending sum reduced once, one all-reduce after each
    o_proj / down projection (2 per layer: attention and MLP), logits stay split on the
    vocabulary, dp is free in the forward. Each all-reduce is of the [batch/dp, seq, hidden]
    block over mp: ``(1 + 2 L) x 2(mp-1)/mp x batch/dp x seq x hidden x 4 B x dp x mp``.
  - *MoE decoder, experts on mp (expert parallelism)*: after the attention's all-reduce every mp
    process holds every token of its dp shard, so the router runs replicated and the dispatch is
    a local selection of the token copies routed to the process's own experts; the combine is
    the sum of the experts' outputs over mp, one all-reduce of [tokens, hidden] per layer (the
    shared expert's row-parallel sum joins it). The figure is the dense one. (Dispatch and
    combine all-to-alls of the routed copies, the layout with tokens split on mp, move more at
    top-k >= 2: 2 x k/mp of the block, plus the gather back to the attention's layout.)
  - *CNN, batch on dp, H on mp*: a window op (conv, pool) with kernel k, stride s, padding p
    needs ``p + max(0, k - s - p)`` rows of its input from its neighbours at each of the mp - 1
    boundaries of a dp group (a halo, sent point-to-point: the receiver's rows); a 1x1 conv
    and a transposed conv with kernel = stride need none. At the first window op whose output
    H is below mp the split ends: one all-gather over mp of that op's input, and every layer
    after it runs with H whole (the batch stays on dp). A global average pool over a split H
    leaves a pending sum, reduced once (one all-reduce of [batch/dp, C]). Ours counts the halo
    exchanges its lowering adds (``HaloStep.predicted_bytes``) with its reshards.
* **DTensor**: torch's ``parallelize_module`` on the mp dim of a 2x2 ``DeviceMesh`` over a fake
  process group (``torch.testing._internal.distributed.fake_pg``), the plan translated style by
  style (below), the model fed its dp shard of the batch (batch/dp rows: dp is free in the
  forward), the collectives recorded under ``CommDebugMode`` with their local tensor and group
  size, converted to our convention, times the 4 processes (every process runs the same
  collectives on blocks of the same size). The translation: ColwiseParallel -> ColwiseParallel;
  ColwiseParallel(chunks=...) (GPT-2's ``c_attn``, Phi-3's ``qkv_proj`` and ``gate_up_proj``,
  whose output the model cuts into chunks by position; the modules ``DECODERS`` lists) ->
  ColwiseParallel with ``output_layouts=Replicate()`` kept as a DTensor: DTensor has no
  chunk-aware style (its ColwiseParallel splits the fused output contiguously, and every slice
  of it would be gathered on its own), so its best is the output gathered once, as a DTensor
  user writes it. Ours stores such a weight interleaved and keeps each chunk split
  (``spmdrules.plan.chunks``). RowwiseParallel -> RowwiseParallel, VocabParallel -> RowwiseParallel with a
  replicated input on an embedding, ColwiseParallel on an LM head, a Spec of mesh-dim names on a
  parameter -> ``distribute_tensor`` with that Shard on mp, DataParallel -> the batch's dp shard.
  Plain tensors meeting DTensors count as replicated (``implicit_replication``). GPT-2's Conv1D
  layers become the equal ``nn.Linear`` (DTensor's styles take only nn.Linear and nn.Embedding).
  For the CNNs, the input is a DTensor (Shard(0) on dp, Shard(2) on mp), the parameters
  replicated.

A row that cannot be measured prints its one-line reason in that column (the first line of the
error); nothing is skipped silently and nothing stops the run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

SEQ, DP, MP, FP32 = 32, 2, 2, 4
#: plan steps that move no data
_LOCAL = frozenset({"slice", "zero_partial"})


@dataclass
class Figure:
    """Forward bytes (our convention) and collectives, or why there are none."""

    bytes: int | None = None
    collectives: int | None = None
    reason: str = ""

    def cell(self) -> str:
        return f"{self.bytes:,} / {self.collectives}" if self.bytes is not None else "-"


@dataclass
class Row:
    model: str
    batch: int
    ours: Figure
    textbook: Figure
    dtensor: Figure

    def ratio(self, other: Figure) -> float | None:
        if self.ours.bytes is None or other.bytes is None or other.bytes == 0:
            return None
        return self.ours.bytes / other.bytes


def _reason(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:220] if lines else ''}"


def measured(fn: Callable[[], Figure]) -> Figure:
    """``fn()``, or its error as the reason (any error: a row never stops the run)."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return fn()
    except Exception as e:
        return Figure(reason=_reason(e))


# ---- ours ------------------------------------------------------------------------------------
def of_completion(result: Any, halos: bool = False) -> Figure:
    """A completed graph's forward bytes and collectives, as ``complete`` plans them; with
    ``halos``, also the halo exchanges its lowering adds (each HaloStep's predicted bytes)."""
    plans = result.plans()
    moved = sum(p.total_bytes for p in plans)
    count = sum(1 for p in plans for s in p.steps if s.kind not in _LOCAL)
    if halos:
        from spmdrules.execution.lowering import lower
        from spmdrules.execution.program import HaloStep

        steps = [i for i in lower(result).instructions if isinstance(i, HaloStep)]
        moved += sum(h.predicted_bytes for h in steps)
        count += len(steps)
    return Figure(moved, count)


def ours_graph(g: Any, spec: dict[str, Any], halos: bool = False) -> Figure:
    from hf_models import MESH

    from spmdrules import plan
    from spmdrules.completion import complete

    plan.apply(g, MESH, spec)
    return of_completion(complete(g), halos)


def ours_module(module: Any, inputs: tuple[Any, ...], spec: dict[str, Any]) -> Figure:
    from spmdrules.importers import torch as torch_import

    return ours_graph(torch_import.export(module, inputs).graph, spec)


def ours_cnn(module: Any, x: Any, spec: dict[str, Any]) -> Figure:
    """Through ONNX: torch's TorchScript exporter, then spmdrules.importers.onnx with every
    Conv's spatial opt-in (the torch importer maps no aten.convolution today)."""
    import onnx
    import torch

    from spmdrules.importers import onnx as onnx_import

    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"])
    model = onnx.load_from_string(buf.getvalue())
    return ours_graph(onnx_import.import_model(model, spatial_sharding=True).graph, spec, True)


# ---- the textbook ------------------------------------------------------------------------------
def all_reduce_bytes(block_bytes: int, n: int) -> int:
    return 2 * (n - 1) * block_bytes // n


def textbook_decoder(batch: int, hidden: int, layers: int) -> Figure:
    """Module docs: 1 + 2 L all-reduces of the [batch/dp, seq, hidden] block over mp."""
    count = 1 + 2 * layers
    block = batch // DP * SEQ * hidden * FP32
    return Figure(count * all_reduce_bytes(block, MP) * DP * MP, count)


def _pair(v: Any) -> int:
    return int(v[0] if isinstance(v, tuple | list) else v)


def textbook_cnn(module: Any, x: Any) -> Figure:
    """The CNN textbook (module docs), read from one forward of ``module`` on ``x`` with hooks
    on its window ops."""
    import torch
    from torch import nn

    total, count, split = 0, 0, True

    def hook(mod: Any, args: tuple[Any, ...], out: Any) -> None:
        nonlocal total, count, split
        n, c, h, w = args[0].shape
        row = n // DP * c * w * FP32  # one row of H of a dp shard
        if not split:
            return
        if isinstance(mod, nn.AdaptiveAvgPool2d):  # a pending sum over mp, reduced once
            total += all_reduce_bytes(n // DP * c * FP32, MP) * DP * MP
            count += 1
            return
        if out.shape[2] < MP:  # the split ends: one all-gather of this input over mp
            total += collective_bytes("all_gather_into_tensor", row * h // MP, MP) * DP * MP
            count += 1
            split = False
            return
        if isinstance(mod, nn.ConvTranspose2d):  # kernel = stride: no halo
            return
        k, s, p = _pair(mod.kernel_size), _pair(mod.stride), _pair(mod.padding)
        rows = p + max(0, k - s - p)
        if rows:
            total += (MP - 1) * rows * row * DP
            count += 1

    window = (nn.Conv2d, nn.MaxPool2d, nn.ConvTranspose2d, nn.AdaptiveAvgPool2d)
    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, window)]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for handle in handles:
            handle.remove()
    return Figure(total, count)


# ---- DTensor -----------------------------------------------------------------------------------
def _mesh() -> Any:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=DP * MP)
    return init_device_mesh("cpu", (DP, MP), mesh_dim_names=("dp", "mp"))


def collective_bytes(op: str, block_bytes: int, n: int) -> int:
    """One process's bytes for a collective of ``op`` on its ``block_bytes`` input (module docs);
    an unknown collective is an error, never a guess."""
    if op == "all_reduce":
        return all_reduce_bytes(block_bytes, n)
    if op == "all_gather_into_tensor":
        return (n - 1) * block_bytes  # (n-1)/n of the gathered block, n times the input
    if op in ("reduce_scatter_tensor", "all_to_all_single", "shard_dim_alltoall"):
        return (n - 1) * block_bytes // n
    raise ValueError(f"collective {op!r}: no conversion to our convention; add it to "
                     "bench/plan_quality.py collective_bytes")


def recording_mode() -> Any:
    """A CommDebugMode that also records each collective's op, input bytes and group size."""
    import torch
    from torch.distributed.distributed_c10d import _resolve_process_group
    from torch.distributed.tensor.debug import CommDebugMode

    class Recording(CommDebugMode):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, int, int]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if out is NotImplemented or isinstance(func, torch._ops.HigherOrderOperator):
                return out
            if func._overloadpacket in self.comm_registry:
                names = [a.name for a in func._schema.arguments]
                g = names.index("group_name")
                group = args[g] if g < len(args) else (kwargs or {})["group_name"]
                self.seen.append((func._overloadpacket.__name__.rstrip("_"),
                                  args[0].numel() * args[0].element_size(),
                                  _resolve_process_group(group).size()))
            return out

    return Recording()


def run_dtensor(module: Any, inputs: tuple[Any, ...]) -> Figure:
    import torch
    from torch.distributed.tensor.experimental import implicit_replication

    mode = recording_mode()
    with torch.no_grad(), mode, implicit_replication():
        module(*inputs)
    return Figure(sum(collective_bytes(op, b, n) for op, b, n in mode.seen) * DP * MP,
                  len(mode.seen))


def _linear_conv1d(module: Any) -> None:
    """GPT-2's Conv1D layers ([in, out] weights) as the equal nn.Linear."""
    import torch
    from transformers.pytorch_utils import Conv1D

    for name, sub in list(module.named_modules()):
        if isinstance(sub, Conv1D):
            lin = torch.nn.Linear(sub.weight.shape[0], sub.weight.shape[1])
            lin.weight.data = sub.weight.data.t().contiguous()
            lin.bias.data = sub.bias.data
            parent, _, leaf = name.rpartition(".")
            setattr(module.get_submodule(parent), leaf, lin)


def dtensor_plan(module: Any, spec: dict[str, Any], fused: tuple[str, ...], mesh: Any) -> Any:
    """Our plan as DTensor's (module docs); Spec entries distribute their parameters in place."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor import parallel as tp

    from spmdrules import plan
    from spmdrules.plan.patterns import Names

    modules = Names(n for n, _ in module.named_modules() if n)
    params = Names(n for n, _ in module.named_parameters())
    chunked = {n for f in fused for n in modules.globbed(f)}
    out: dict[str, Any] = {}
    for key, style in spec.items():
        if isinstance(style, plan.DataParallel):
            continue  # the batch's dp shard is what the model is fed
        if isinstance(style, plan.Spec):
            for name in params.named(key) if params.has(key) else params.globbed(key):
                placements = [Shard(d) for d, m in enumerate(style.spec) if m == "mp"]
                parent, _, leaf = name.rpartition(".")
                owner = module.get_submodule(parent)
                owner.register_parameter(leaf, torch.nn.Parameter(distribute_tensor(
                    getattr(owner, leaf).detach(), mesh["mp"], placements or [Replicate()])))
            continue
        for name in modules.named(key) if modules.has(key) else modules.globbed(key):
            embedding = isinstance(module.get_submodule(name), torch.nn.Embedding)
            if isinstance(style, plan.VocabParallel):
                out[name] = (tp.RowwiseParallel(input_layouts=Replicate()) if embedding
                             else tp.ColwiseParallel())
            elif isinstance(style, plan.ColwiseParallel):
                out[name] = (tp.ColwiseParallel(output_layouts=Replicate(), use_local_output=False)
                             if name in chunked else tp.ColwiseParallel())
            elif isinstance(style, plan.RowwiseParallel):
                out[name] = tp.RowwiseParallel()
            else:
                raise ValueError(f"plan entry {key!r}: {style!r} has no DTensor translation here")
    return out


def dtensor_decoder(kind: str, batch: int) -> Figure:
    import torch
    from hf_models import DECODERS, SIZES, decoder
    from torch.distributed.tensor.parallel import parallelize_module

    _, spec, fused = DECODERS[kind]
    mesh = _mesh()
    module = decoder(kind)
    _linear_conv1d(module)
    parallelize_module(module, mesh["mp"], dtensor_plan(module, spec, fused, mesh))
    ids = torch.randint(0, SIZES["vocab"], (batch // DP, SEQ))
    return run_dtensor(module, (ids,))


# ---- rows --------------------------------------------------------------------------------------
def decoder_row(kind: str, batch: int) -> Row:
    import torch
    from hf_models import DECODERS, SIZES, decoder

    label, spec, _ = DECODERS[kind]
    ids = torch.randint(0, SIZES["vocab"], (batch, SEQ),
                        generator=torch.Generator().manual_seed(1))
    return Row(label, batch,
               measured(lambda: ours_module(decoder(kind), (ids,), spec)),
               textbook_decoder(batch, SIZES["hidden"], SIZES["layers"]),
               measured(lambda: dtensor_decoder(kind, batch)))


def cnn_row(kind: str, batch: int) -> Row:
    from cnn_models import CNNS, SPATIAL_PLAN

    label, build, size = CNNS[kind]
    import torch

    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))

    def dtensor() -> Figure:
        from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

        mesh = _mesh()
        module = distribute_module(build(), mesh)
        try:
            return run_dtensor(module, (distribute_tensor(x, mesh, [Shard(0), Shard(2)]),))
        except RuntimeError as e:  # DTensor's own error, said where it came from
            raise RuntimeError(f"DTensor on the input split (Shard(0), Shard(2)): "
                               f"{_reason(e)}") from e

    return Row(label, batch, measured(lambda: ours_cnn(build(), x, SPATIAL_PLAN)),
               measured(lambda: textbook_cnn(build(), x)), measured(dtensor))


def routed_experts_row() -> Row:
    """The routed-experts layer (tests/support/routed_experts.py; no batch: T tokens)."""
    import routed_experts as re_

    from spmdrules.completion import complete

    def dtensor() -> Figure:
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        _mesh()
        mesh = init_device_mesh("cpu", (re_.EP,), mesh_dim_names=("ep",))
        gen = torch.Generator().manual_seed(0)
        v = {n: distribute_tensor(torch.randn(*shape, generator=gen), mesh, [Shard(dim)])
             for n, (shape, dim) in re_.TENSORS.items()}
        mode = recording_mode()
        with torch.no_grad(), mode:
            re_.torch_forward(v).redistribute(mesh, [Shard(0)])  # the output split on T
        return Figure(sum(collective_bytes(op, b, n) for op, b, n in mode.seen) * re_.EP,
                      len(mode.seen))

    # textbook: a dispatch and a combine all-to-all of [E, T, D] between its T and E splits
    block = re_.E * re_.T // re_.EP * re_.D * FP32
    textbook = Figure(2 * collective_bytes("all_to_all_single", block, re_.EP) * re_.EP, 2)
    ours = measured(lambda: of_completion(complete(re_.graph())))
    return Row("routed experts (tokens)", re_.T, ours, textbook, measured(dtensor))


def rows_for(models: list[str], batches: list[int]) -> list[Row]:
    from hf_models import DECODERS

    out: list[Row] = []
    for kind in models:
        if kind == "routed_experts":
            out.append(routed_experts_row())
            continue
        for b in batches:
            out.append(decoder_row(kind, b) if kind in DECODERS else cnn_row(kind, b))
            print(f"  measured {out[-1].model} at batch {b}", file=sys.stderr, flush=True)
    return out


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def print_table(rows: list[Row]) -> None:
    head = ("model", "batch", "ours B / coll", "textbook B / coll", "DTensor B / coll",
            "ours/textbook", "ours/DTensor")
    body = [(r.model, str(r.batch), r.ours.cell(), r.textbook.cell(), r.dtensor.cell(),
             _ratio(r.ratio(r.textbook)), _ratio(r.ratio(r.dtensor))) for r in rows]
    widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]
    for line in [head, tuple("-" * w for w in widths), *body]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
    notes = [(r.model, r.batch, col, f.reason) for r in rows
             for col, f in (("ours", r.ours), ("textbook", r.textbook), ("DTensor", r.dtensor))
             if f.reason]
    if notes:
        print("\nnot measured:")
        for model, batch, col, why in notes:
            print(f"  {model} batch {batch}, {col}: {why}")


def environment() -> dict[str, str]:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def main(argv: list[str] | None = None) -> None:
    from cnn_models import CNNS
    from hf_models import DECODERS

    known = [*DECODERS, *CNNS, "routed_experts"]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", type=lambda s: s.split(","), default=known,
                    help=f"comma-separated, of: {','.join(known)} (default: all)")
    ap.add_argument("--batch", type=int, nargs="+", default=[2, 4],
                    help="batch sizes (each a multiple of dp=2; default: 2 4)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    unknown = [m for m in args.models if m not in known]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    odd = [b for b in args.batch if b <= 0 or b % DP]
    if odd:
        ap.error(f"batch {odd}: each must be a positive multiple of dp={DP}")
    env = environment()
    rows = rows_for(args.models, args.batch)
    if args.json:
        print(json.dumps({"environment": env, "rows": [asdict(r) for r in rows]}, indent=1))
        return
    print(", ".join(f"{k} {v}" for k, v in env.items())
          + f"; 2x2 (dp x mp) mesh, seq {SEQ}, fp32, eager attention; bytes summed over the "
          "4 processes (ring algorithms), forward only")
    print_table(rows)


if __name__ == "__main__":
    main()
