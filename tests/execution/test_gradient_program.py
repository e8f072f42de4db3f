"""Reverse mode on the simulated mesh: every end-to-end case's gradients against numerical
derivatives of the serial model, and the gradient program's bytes against the plans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pipeline_cases import CASES, LIMITS, pipeline_stages

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.core.errors import UnsupportedError
from spmdrules.execution.adjoint import GradientError, dual_attr, gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import Collective, LocalStep, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

GRAD_CASES = sorted(c for c in CASES if c != "2d-partial-max-input")


def _run(g: Graph, prog: Program, seed: int = 7) -> tuple[Program, Any, dict[str, Any],
                                                         dict[str, Any]]:
    out = prog.tensors[-1]
    gp = gradient_program(prog, [out])
    feeds = random_feeds(prog, seed=seed, vocab_limits=LIMITS)
    seeds = {out: np.random.default_rng(seed).standard_normal(prog.buffers[out].shape)}
    feeds[gp.seeds[out]] = seeds[out]
    return gp, run_simulated(gp, feeds), feeds, seeds


@pytest.mark.parametrize("name", GRAD_CASES)
def test_gradients_equal_the_serial_numerical_derivatives(name: str) -> None:
    g = CASES[name]()
    prog = lower(complete(g))
    gp, res, feeds, seeds = _run(g, prog)
    grads = {t: res.fetch(b) for t, b in gp.grads.items()}
    assert set(grads) == {n for n in prog.feeds if prog.buffers[n].dtype.startswith("float")}
    checks = check_gradients(g, feeds, seeds, grads, directions=1, entries=1)
    worst = max(checks, key=lambda c: c.error)
    assert worst.error <= 1e-7, worst
    # the forward part is untouched and still the serial answer
    assert gp.instructions[:len(prog.instructions)] == prog.instructions
    if "uneven" in name:
        for label, want in res.traffic.predicted(gp).items():
            assert res.traffic.per_edge.get(label, 0) <= want
    else:
        assert res.traffic.mismatches(gp) == []
    # each reshard edge that carries a cotangent has its adjoint edge, at the plan's bytes
    assert {e.label for e in gp.edges} >= {e.label for e in prog.edges}


def test_adjoints_cover_the_collective_kinds() -> None:
    kinds: set[str] = set()
    for name in GRAD_CASES:
        prog = lower(complete(CASES[name]()))
        gp = gradient_program(prog, [prog.tensors[-1]])
        kinds |= {i.kind for i in gp.instructions[len(prog.instructions):]
                  if isinstance(i, Collective) and i.edge.startswith("grad[")}
    assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"} <= kinds


def test_gradients_in_the_tensors_own_layout_or_pending() -> None:
    g = CASES["2d-megatron"]()
    prog = lower(complete(g))
    reduced = gradient_program(prog, ["out"])
    pending = gradient_program(prog, ["out"], reduce_grads=False)
    # fc2.bias is replicated over both mesh dims: reduced, its gradient is laid out like it
    b = reduced.grads["fc2.bias"]
    assert reduced.buffers[b].attr == prog.buffers["fc2.bias"].attr
    assert pending.buffers[pending.grads["fc2.bias"]].attr == dual_attr(
        prog.buffers["fc2.bias"].attr)
    feeds = random_feeds(prog, seed=2)
    feeds["seed:out"] = np.ones(prog.buffers["out"].shape)
    a, c = run_simulated(reduced, feeds), run_simulated(pending, feeds)
    for t in reduced.grads:
        np.testing.assert_allclose(a.fetch(reduced.grads[t]), c.fetch(pending.grads[t]),
                                   rtol=1e-12, atol=1e-12)
    # every process holds the whole reduced bias gradient
    blocks = a.blocks[b]
    assert all(np.array_equal(blocks[0], blk) for blk in blocks.values())


@pytest.mark.parametrize("w1_spec", [("mp", None), (None, None), (None, "mp")])
def test_gradients_cross_pipelinepipeline_stages(w1_spec: tuple[Any, ...]) -> None:
    g = pipeline_stages(w1_spec)
    prog = lower(complete(g))
    gp, res, feeds, seeds = _run(g, prog)
    kinds = {i.kind for i in gp.instructions if isinstance(i, Collective)}
    assert "p2p" in kinds
    checks = check_gradients(g, feeds, seeds, {t: res.fetch(b) for t, b in gp.grads.items()})
    assert max(c.error for c in checks) <= 1e-7
    assert res.traffic.mismatches(gp) == []
    if w1_spec == (None, None):  # w1 is sliced locally: its adjoint writes into zeros
        assert any(isinstance(i, LocalStep) and i.op.startswith("grad[w1")
                   for i in gp.instructions)


def test_a_transfer_that_changes_the_layout_returns_its_pieces_to_their_owners() -> None:
    prog = lower(complete(pipeline_stages((None, "mp"))))
    gp = gradient_program(prog, ["out"])
    [back] = [i for i in gp.instructions if isinstance(i, Collective) and i.kind == "p2p"
              and i.edge.startswith("grad[")]
    assert back.adjoint
    # h [0,1] on stage 0 goes to [0,-1] on stage 1: replicated over stage 1's mp dim, its
    # cotangent there is a pending sum, whose pieces go back to h's blocks and add up
    assert prog.buffers["h"].attr.mapping_str() == "[0,1]"
    assert gp.buffers[back.src].attr.partial_items == ((1, "sum"),)
    assert gp.buffers[back.dst].attr.partial_items == ()


def test_a_pending_max_is_refused_with_the_fix() -> None:
    prog = lower(complete(CASES["2d-partial-max-input"]()))
    with pytest.raises(UnsupportedError, match=r"pending max .* reduce it before"):
        gradient_program(prog, ["out"])
    # asking only for what does not depend on x is fine
    gp = gradient_program(prog, ["out"], wrt=["fc1.weight"])
    assert set(gp.grads) == {"fc1.weight"}


def test_bad_requests_name_the_tensor() -> None:
    prog = lower(complete(CASES["2d-gpt"]()))
    with pytest.raises(GradientError, match="output 'nope' is not a tensor"):
        gradient_program(prog, ["nope"])
    with pytest.raises(GradientError, match="wrt 'input_ids' holds int64"):
        gradient_program(prog, ["loss"], wrt=["input_ids"])
    with pytest.raises(GradientError, match="at least one output"):
        gradient_program(prog, [])
    with pytest.raises(GradientError, match="already a gradient program"):
        gradient_program(gradient_program(prog, ["loss"]), ["loss"])


def test_dual_layouts() -> None:
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    a = sr.DistAttr(mesh, [0, -1], partial={1: "sum"})
    d = dual_attr(a)
    assert d.multi_dims_mapping == a.multi_dims_mapping and d.partial_items == ()
    r = sr.DistAttr(mesh, [-1, -1])
    assert dual_attr(r).partial_items == ((0, "sum"), (1, "sum"))
    assert dual_attr(dual_attr(a)) == a


def test_a_parameter_used_twice_is_reduced_into_its_layout() -> None:
    """Two contributions are added, then all-reduced like any gradient; an unused parameter gets
    zeros in its own layout without any communication."""
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    with Graph("twice") as g:
        x = g.input("x", [4, 8], "float64")
        w = g.param("w", [8, 8], "float64")
        g.param("unused", [3], "float64")
        h = ops.tanh(ops.matmul(x, w, name="mm0"), name="h")
        ops.matmul(h, w, name="out")
    shard(x, mesh, ("dp", None))
    prog = lower(complete(g))
    gp, res, feeds, seeds = _run(g, prog)
    assert gp.buffers[gp.grads["w"]].attr == prog.buffers["w"].attr
    assert gp.buffers[gp.grads["unused"]].attr == prog.buffers["unused"].attr
    assert np.array_equal(res.fetch(gp.grads["unused"]), np.zeros(3))
    assert not any(isinstance(i, Collective) and i.src.startswith("grad:unused")
                   for i in gp.instructions)
    checks = check_gradients(g, feeds, seeds, {t: res.fetch(b) for t, b in gp.grads.items()})
    assert max(c.error for c in checks) <= 1e-7
