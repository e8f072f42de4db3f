"""Paddle's PIR propagation time for a LLaMA decoder stack; run under an interpreter with
paddlepaddle==3.3.1 (bench/import.py runs it in a subprocess and reads the JSON it prints last).

    /path/to/paddle/python bench/paddle_pir.py [--layers 32] [--hidden 256] [--repeat 7]

Where Paddle 3.3.1 propagates. In PIR, each operator's generated ``InferMeta`` (called by its
``Build``) has an auto-parallel branch (``GenDistBranch`` of
``paddle/fluid/pir/dialect/op_generator/op_build_gen.py``): when an operand has a dist type
(``HasDistInput``), it converts every operand to a dist type (``CvtAllInputsToDist``), runs the
op's phi SPMD rule (or a replicating fallback for an op without one) forward on their dist
attributes, and gives the results dist types carrying the rule's answer (and the op its
``op_dist_attr``). That is the whole of Paddle's semi-auto propagation: ``Engine._parallel_pir``
(``dist.to_static``) builds the program this way, its ``apply_mix2dist_pass`` only removes the
``shard_tensor`` ops, and its "Part 2" (entire-graph completion) is a TODO that does nothing in
3.3.1. One forward rule run per op, in build order.

What is timed. A static PIR program (``paddle.enable_static()``; one process: a ProcessMesh needs
no launch) of the LLaMA forward, written op for op after transformers' LlamaForCausalLM (the model
bench/import.py exports) with Paddle's unfused functional ops: embedding; per layer RMSNorm as
pow/mean/+eps/rsqrt/multiply/multiply, q/k/v projections (matmul with [in, out] weights),
reshape/transpose to heads, RoPE (slice, negate, concat, multiply, add), GQA's repeat of k and v
(unsqueeze/expand/reshape), scores (matmul with transpose_y, scale), the additive causal mask,
softmax, the context matmul, transpose/reshape back, o_proj, residual add, RMSNorm, SwiGLU (gate/up
matmul, silu, multiply, down matmul), residual add; final RMSNorm and the LM head. The rotary
cos/sin are made from position ids (cast, multiply by inv_freq, concat, cos, sin), the mask is an
input. The inputs and parameters are created (and, in the dist build, annotated with
``dist.shard_tensor`` Megatron-style on the 2x2 (dp, mp) mesh: ids, positions and mask Shard(0) on
dp; embedding rows and o/down_proj rows Shard(0) on mp; q/k/v/gate/up and the LM head Shard(1) on
mp; norms and inv_freq replicated) before the timer starts; the timer covers building the forward
ops only.

The same forward is built twice: ``plain`` without annotations (dense types: shape inference only)
and ``dist`` with them (shape inference, plus the dist branch of every op with a dist operand).
``propagation = dist - plain`` is then the time Paddle spends propagating: the Python API calls, op
creation and shape inference are the same on both sides and cancel. Each variant is built once
untimed first (lazy imports, first-use registrations), then ``--repeat`` times, in fresh Programs,
the two builds of a repeat next to each other (their order alternating). ``propagation`` is the
median over the repeats of ``dist - plain`` within a repeat (a paired difference: the shared
machine's drift between repeats cancels), in wall time (``perf_counter``) and in this process's CPU
time (``process_time``); the builds' own times are medians too. The difference charges Paddle with
everything its dist mode adds to building an op, in C++ and in Python: its rule run, the conversion
of the operands to dist types, and the dist types and ``op_dist_attr`` that record the answer. The
op counts are read from the built program: ``ops`` every op the forward added (constants such as
``full_int_array`` of reshape shapes and ``builtin.combine`` of concat included) and ``ops_spmd``
the ops that carry an ``op_dist_attr`` and have an operand, i.e. the ops that ran an SPMD rule.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
import warnings
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import paddle  # type: ignore[import-not-found]  # noqa: E402
import paddle.distributed as dist  # type: ignore[import-not-found]  # noqa: E402
import paddle.nn.functional as F  # type: ignore[import-not-found]  # noqa: E402


class Llama:
    """The sizes of bench/import.py's LLaMA (its config: GQA, SwiGLU, RMSNorm, RoPE)."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.layers, self.hidden, self.heads, self.kv_heads = (
            ns.layers, ns.hidden, ns.heads, ns.kv_heads)
        self.ffn, self.vocab, self.batch, self.seq = ns.ffn, ns.vocab, ns.batch, ns.seq
        self.head_dim = self.hidden // self.heads


def _params(m: Llama, mesh: Any | None) -> dict[str, Any]:
    """Inputs and parameters, annotated Megatron-style when ``mesh`` is given."""
    r, dp, mp = "replicate", (0, "dp"), (0, "mp")
    col, row = (1, "mp"), (0, "mp")
    spec: dict[str, tuple[list[int], str, Any]] = {
        "ids": ([m.batch, m.seq], "int64", dp), "pos": ([m.batch, m.seq], "int64", dp),
        "mask": ([m.batch, 1, m.seq, m.seq], "float32", dp),
        "embed": ([m.vocab, m.hidden], "float32", mp), "inv_freq": ([m.head_dim // 2], "float32", r),
        "norm": ([m.hidden], "float32", r), "lm_head": ([m.hidden, m.vocab], "float32", col),
    }
    kv = m.kv_heads * m.head_dim
    for i in range(m.layers):
        spec |= {
            f"{i}.ln1": ([m.hidden], "float32", r), f"{i}.ln2": ([m.hidden], "float32", r),
            f"{i}.q": ([m.hidden, m.hidden], "float32", col), f"{i}.k": ([m.hidden, kv], "float32", col),
            f"{i}.v": ([m.hidden, kv], "float32", col), f"{i}.o": ([m.hidden, m.hidden], "float32", row),
            f"{i}.gate": ([m.hidden, m.ffn], "float32", col), f"{i}.up": ([m.hidden, m.ffn], "float32", col),
            f"{i}.down": ([m.ffn, m.hidden], "float32", row),
        }
    out: dict[str, Any] = {}
    for name, (shape, dtype, shard) in spec.items():
        if name in ("ids", "pos", "mask"):
            t = paddle.static.data(name, shape, dtype)
        else:
            t = paddle.create_parameter(shape, dtype, name=f"p.{name}")
        if mesh is not None:
            placements = [dist.Replicate(), dist.Replicate()]
            if shard != r:
                placements[mesh.dim_names.index(shard[1])] = dist.Shard(shard[0])
            t = dist.shard_tensor(t, mesh, placements)
        out[name] = t
    return out


def _rms(x: Any, w: Any) -> Any:
    var = paddle.mean(paddle.pow(x, 2), axis=-1, keepdim=True)
    return w * (x * paddle.rsqrt(var + 1e-6))


def _rotate(x: Any, half: int) -> Any:
    return paddle.concat([-x[..., half:], x[..., :half]], axis=-1)


def _forward(m: Llama, p: dict[str, Any]) -> Any:
    b, s, hd = m.batch, m.seq, m.head_dim
    rep = m.heads // m.kv_heads
    h = F.embedding(p["ids"], p["embed"])
    freqs = paddle.unsqueeze(paddle.cast(p["pos"], "float32"), -1) * p["inv_freq"]
    emb = paddle.concat([freqs, freqs], axis=-1)
    cos, sin = paddle.unsqueeze(paddle.cos(emb), 1), paddle.unsqueeze(paddle.sin(emb), 1)
    for i in range(m.layers):
        x = _rms(h, p[f"{i}.ln1"])
        q = paddle.matmul(x, p[f"{i}.q"]).reshape([b, s, m.heads, hd]).transpose([0, 2, 1, 3])
        k = paddle.matmul(x, p[f"{i}.k"]).reshape([b, s, m.kv_heads, hd]).transpose([0, 2, 1, 3])
        v = paddle.matmul(x, p[f"{i}.v"]).reshape([b, s, m.kv_heads, hd]).transpose([0, 2, 1, 3])
        q = q * cos + _rotate(q, hd // 2) * sin
        k = k * cos + _rotate(k, hd // 2) * sin
        k = k.unsqueeze(2).expand([b, m.kv_heads, rep, s, hd]).reshape([b, m.heads, s, hd])
        v = v.unsqueeze(2).expand([b, m.kv_heads, rep, s, hd]).reshape([b, m.heads, s, hd])
        scores = paddle.matmul(q, k, transpose_y=True) * (hd ** -0.5) + p["mask"]
        ctx = paddle.matmul(F.softmax(scores, axis=-1), v)
        ctx = ctx.transpose([0, 2, 1, 3]).reshape([b, s, m.hidden])
        h = h + paddle.matmul(ctx, p[f"{i}.o"])
        x = _rms(h, p[f"{i}.ln2"])
        act = F.silu(paddle.matmul(x, p[f"{i}.gate"])) * paddle.matmul(x, p[f"{i}.up"])
        h = h + paddle.matmul(act, p[f"{i}.down"])
    return paddle.matmul(_rms(h, p["norm"]), p["lm_head"])


def build(m: Llama, mesh: Any | None) -> dict[str, Any]:
    """One build of the forward in a fresh Program: its wall and CPU seconds and op counts."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        params = _params(m, mesh)
        block = main.global_block()
        first = len(block.ops)
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        logits = _forward(m, params)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        ops = block.ops[first:]
    spmd = sum(1 for op in ops if op.dist_attr is not None and op.num_operands() > 0)
    out = {"wall": wall, "cpu": cpu, "ops": len(ops), "ops_spmd": spmd}
    if mesh is not None:
        out["logits"] = str(logits.dist_attr())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=7)
    ns = ap.parse_args()
    m = Llama(ns)
    paddle.enable_static()
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    build(m, None), build(m, mesh)  # untimed: lazy imports and first-use registrations
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "dist": []}
    for i in range(ns.repeat):
        order = ("plain", "dist") if i % 2 == 0 else ("dist", "plain")
        for kind in order:
            runs[kind].append(build(m, mesh if kind == "dist" else None))
    res: dict[str, Any] = {"paddle": paddle.__version__, "layers": ns.layers,
                           "repeat": ns.repeat}
    for kind, rs in runs.items():
        res[kind] = {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu")}
        res[kind] |= {"ops": rs[-1]["ops"], "ops_spmd": rs[-1]["ops_spmd"]}
    res["propagation"] = {
        k: statistics.median(d[k] - p[k] for d, p in zip(runs["dist"], runs["plain"], strict=True))
        for k in ("wall", "cpu")
    }
    res["logits"] = runs["dist"][-1]["logits"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
