"""The LLaMA decoder example (issue 11): grouped-query attention with slice/concat RoPE, a triu +
where causal mask, tile for the KV heads and a SwiGLU MLP, annotated Megatron-style, completes with
the practitioner's layout and runs forward and in reverse on 4 MPI ranks equal to serial numpy."""

from __future__ import annotations

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.errors import InvalidSpecError, ShapeError

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
SIZES = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}
LIMITS = {"input_ids": 64, "labels": 64}


def A(mapping: list[int], partial: dict[int, str] | None = None) -> sr.DistAttr:
    return sr.DistAttr(MESH, mapping, partial=partial or {})


@pytest.mark.parametrize("layers", [1, 3])
def test_the_block_has_the_ops_and_annotations_it_documents(layers: int) -> None:
    g = examples.llama_decoder(layers, MESH, **SIZES)
    assert g.num_ops == examples.LLAMA_OPS_PER_LAYER * layers + examples.LLAMA_OPS_OUTSIDE
    assert len(g.annotated()) == (examples.LLAMA_ANNOTATED_PER_LAYER * layers
                                  + examples.LLAMA_ANNOTATED_OUTSIDE)
    types = {op.type for op in g.ops}
    assert {"slice", "concat", "tile", "triu", "where", "swiglu", "fused_rms_norm", "arange",
            "full", "cast"} <= types
    # attention scores are scaled by 1/sqrt(head_dim)
    assert g.op("layers.0.scaled").attr("scale") == pytest.approx(1 / np.sqrt(8))


def test_completion_puts_the_heads_on_mp_and_one_all_reduce_after_each_row_parallel_matmul(
) -> None:
    layers = 3
    r = complete(examples.llama_decoder(layers, MESH, **SIZES))
    assert r.converged
    for i in range(layers):
        n = f"layers.{i}"
        for t in ("q_heads", "q.rope", "k.repeated", "v.repeated"):
            assert r.attr(f"{n}.{t}") == A([0, -1, 1, -1]), t  # [b, s, heads, d]: heads on mp
        for t in ("scores", "masked", "probs", "context"):
            assert r.attr(f"{n}.{t}") == A([0, 1, -1, -1]), t  # [b, heads, s, s]
        assert r.attr(f"{n}.swiglu") == A([0, -1, 1])
        assert r.attr(f"{n}.o") == r.attr(f"{n}.down") == A([0, -1, -1], {1: "sum"})
    assert r.attr("mask") == A([-1, -1, -1, -1])
    assert [(e.tensor, e.op) for e in r.reshards] == [("embed", "embed")] + [
        (f"layers.{i}.{m}", f"layers.{i}.residual{k}") for i in range(layers)
        for m, k in (("o", 1), ("down", 2))]
    assert all([s.kind for s in p.steps] == ["all_reduce"] for p in r.plans())


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_every_activation_is_float32_and_the_all_reduces_move_float32(fused: bool) -> None:
    # the rotary tables and the mask's fill were float64 constants, which promoted q, k, the
    # scores and every activation after them to float64 and doubled the bytes of the plain block
    g = examples.llama_decoder(2, MESH, fused=fused, **SIZES)
    floats = {t.name: t.dtype for t in g.tensors if t.dtype not in ("int64", "bool")}
    assert floats and set(floats.values()) == {"float32"}, {
        n: d for n, d in floats.items() if d != "float32"}
    r = complete(g)
    assert r.reshards and all(g.tensor(e.tensor).dtype == "float32" for e in r.reshards)
    # each all-reduce (ring, over mp = 2) has every one of the 4 processes send its float32
    # [batch / dp, seq, hidden] block once: twice the activation's bytes in all
    block = SIZES["batch"] // 2 * SIZES["seq"] * SIZES["hidden"] * 4
    assert [p.total_bytes for p in r.plans()] == [4 * block] * len(r.plans())


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ShapeError, match="kv_heads dividing heads"):
        examples.llama_decoder(1, MESH, **{**SIZES, "kv_heads": 3})
    with pytest.raises(ShapeError, match="head_dim 3 must be even"):
        examples.llama_decoder(1, MESH, **{**SIZES, "hidden": 12, "heads": 4})
    with pytest.raises(InvalidSpecError, match="needs a 2-D ProcessMesh"):
        examples.llama_decoder(1, sr.ProcessMesh([0, 1]), **SIZES)


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_forward_and_reverse_on_4_mpi_ranks_equal_serial_numpy_with_the_plans_bytes(
        fused: bool) -> None:
    g = examples.llama_decoder(2, MESH, fused=fused, **SIZES)
    prog = lower(complete(g))
    loss = prog.tensors[-1]
    gp = gradient_program(prog, [loss])
    feeds = random_feeds(prog, seed=2, vocab_limits=LIMITS)
    seeds = {loss: np.asarray(1.0)}
    feeds[gp.seeds[loss]] = seeds[loss]
    run = run_mpi(gp, feeds, nprocs=4, fetch=[*prog.tensors, *gp.grads.values()], timeout=200)
    err, worst = max_error({n: run.values[n] for n in prog.tensors}, run_serial(g, feeds))
    assert err <= 1e-12, (worst, err)
    grads = {t: run.values[b] for t, b in gp.grads.items()}
    checks = check_gradients(g, feeds, seeds, grads, directions=1, entries=1)
    assert max(c.error for c in checks) <= 1e-7
    assert run.traffic.mismatches(gp) == []  # bytes sent equal the plans', forward and reverse
    sim = run_simulated(gp, feeds)
    for b in gp.grads.values():
        np.testing.assert_allclose(run.values[b], sim.fetch(b), rtol=1e-12, atol=1e-12)


# ---- fused=True: fused_rotary_position_embedding and flash_attention (issue 12) ----------------
def test_fused_block_completes_with_the_heads_on_mp_and_the_same_all_reduces() -> None:
    layers = 2
    g = examples.llama_decoder(layers, MESH, fused=True, **SIZES)
    types = {op.type for op in g.ops}
    assert {"flash_attention", "fused_rotary_position_embedding"} <= types
    assert not {"where", "triu", "tile", "softmax", "slice"} & types
    attn = g.op("layers.0.attention")
    assert attn.attr("causal") is True and attn.attr("is_test") is True
    assert g.op("layers.0.q.rope").attr("use_neox_rotary_style") is False
    r = complete(g)
    assert r.converged
    for i in range(layers):
        n = f"layers.{i}"
        for t in ("q_heads", "k_heads", "v_heads", "q.rope.out_q", "k.rope.out_q",
                  "attention.out"):
            assert r.attr(f"{n}.{t}") == A([0, -1, 1, -1]), t  # [b, s, heads, d]: heads on mp
        assert r.attr(f"{n}.attention.softmax_lse") == A([0, 1, -1])
        assert r.attr(f"{n}.o") == r.attr(f"{n}.down") == A([0, -1, -1], {1: "sum"})
    assert [(e.tensor, e.op) for e in r.reshards] == [("embed", "embed")] + [
        (f"layers.{i}.{m}", f"layers.{i}.residual{k}") for i in range(layers)
        for m, k in (("o", 1), ("down", 2))]


def test_fused_block_computes_the_unfused_one() -> None:
    fused = examples.llama_decoder(1, MESH, fused=True, **SIZES)
    plain = examples.llama_decoder(1, MESH, **SIZES)
    feeds = random_feeds(lower(complete(plain)), seed=3, vocab_limits=LIMITS)
    a, b = run_serial(fused, feeds), run_serial(plain, feeds)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-12)
    np.testing.assert_allclose(a["layers.0.merge"], b["layers.0.merge"], atol=1e-12)


def test_fused_sequence_parallel_splits_norms_and_residuals_by_sequence() -> None:
    r = complete(examples.llama_decoder(2, MESH, fused=True, sequence_parallel=True, **SIZES))
    assert r.converged
    for i in range(2):
        n = f"layers.{i}"
        assert r.attr(f"{n}.residual1") == r.attr(f"{n}.residual2") == A([0, 1, -1])  # [b, s, h]
        assert r.attr(f"{n}.attention.out") == A([0, -1, 1, -1])  # whole sequence, heads on mp
    kinds = sorted(s.kind for p in r.plans() for s in p.steps)
    # the embedding's and each row-parallel result's sum reduce-scattered by sequence; each
    # column-parallel projection (and the LM head) reads an all-gathered input
    assert kinds == ["all_gather"] * 5 + ["reduce_scatter"] * 5


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_fused_sequence_parallel_on_4_mpi_ranks_equals_serial_with_the_plans_bytes() -> None:
    g = examples.llama_decoder(1, MESH, fused=True, sequence_parallel=True, **SIZES)
    prog = lower(complete(g))
    loss = prog.tensors[-1]
    gp = gradient_program(prog, [loss])
    feeds = random_feeds(prog, seed=4, vocab_limits=LIMITS)
    feeds[gp.seeds[loss]] = np.asarray(1.0)
    run = run_mpi(gp, feeds, nprocs=4, fetch=[*prog.tensors, *gp.grads.values()], timeout=200)
    err, worst = max_error({n: run.values[n] for n in prog.tensors}, run_serial(g, feeds))
    assert err <= 1e-12, (worst, err)
    grads = {t: run.values[b] for t, b in gp.grads.items()}
    checks = check_gradients(g, feeds, {loss: np.asarray(1.0)}, grads, directions=1, entries=1)
    assert max(c.error for c in checks) <= 1e-7
    assert run.traffic.mismatches(gp) == []
