"""Conflicts settled by the cost (issue 24, cause 4): when an op's operands disagree, completion
prices the reshards of every operand for the rule's answer and for the answers with one operand
left free, and the cheapest total wins; the rules' answers stay Paddle's."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import routed_experts as re_
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.completion import Completion, complete
from spmdrules.completion.explain import explain
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import Program
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

EP = sr.ProcessMesh(list(range(4)), dim_names=["ep"])
#: the dispatch and combine all-to-alls of the [E, T, D] fp32 routed tokens between their T and
#: E splits over ep = 4: each process sends 3/4 of its [E, T/4, D] block
ALL_TO_ALL = 3 * re_.E * (re_.T // 4) * re_.D * 4 // 4 * 4


def routed() -> Completion:
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.DroppedSplitWarning)  # no split may be dropped
        return complete(re_.graph())


def test_routed_experts_move_the_tokens_by_all_to_all_and_never_gather_the_weights() -> None:
    r = routed()
    # tokens split on T; the experts' matmuls need the routed copies split on E, as w1 and w2
    # are: the dispatch's result is moved there once, and back once before the combine
    assert [(e.tensor, e.op, e.src.mapping_str(), e.dst.mapping_str()) for e in r.reshards] == [
        ("einsum_0", "einsum_1", "[-1,0,-1]", "[0,-1,-1]"),
        ("einsum_3", "einsum_4", "[0,-1,-1]", "[-1,0,-1]")]
    assert [s.kind for p in r.plans() for s in p.steps] == ["all_to_all", "all_to_all"]
    assert r.bytes_moved == 2 * ALL_TO_ALL == 49_152  # the textbook's bytes
    for w in ("w1", "w2"):
        assert r.attr(w) == sr.DistAttr(EP, [0, -1, -1]) and r.reshards_of(w) == ()
    assert r.attr("einsum_1") == sr.DistAttr(EP, [0, -1, -1])  # the experts run on their split


def test_the_rules_answer_is_what_a_conflict_is_settled_against() -> None:
    # The einsum rule, given the routed tokens split on T and w1 split on E (one mesh dim for
    # two letters), keeps T and needs w1 gathered: that answer is Paddle's and stays the rule's
    h = sr.TensorSpec([re_.E, re_.T, re_.D], sr.DistAttr(EP, [-1, 0, -1]))
    w1 = sr.TensorSpec([re_.E, re_.D, re_.F], sr.DistAttr(EP, [0, -1, -1]))
    info = sr.get_rule("einsum").infer_forward([h, w1], re_.UP)
    got = info.inputs[0]  # the einsum's one list operand
    assert isinstance(got, tuple)
    assert [None if a is None else a.mapping_str() for a in got] == ["[-1,0,-1]", "[-1,-1,-1]"]


def test_explain_names_the_reshard_the_settled_conflict_puts_on_the_routed_tokens() -> None:
    text = explain(routed(), "einsum_0")
    assert "into einsum_1: [-1,0,-1] => [0,-1,-1], 24.0 KB" in text
    assert "all-to-all(ep) [-1,0,-1] -> [0,-1,-1]: 6.0 KB/process, 24.0 KB total" in text
    assert "no alternative was offered" in explain(routed(), "w1")


@pytest.mark.timeout(300)
def test_routed_experts_run_equal_to_serial_forward_and_gradients_with_the_plans_bytes() -> None:
    g = re_.graph()
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=4)
    assert_simulated_equals_serial(g, feeds, prog=prog, loss="einsum_4")


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_routed_experts_run_on_4_mpi_ranks_equal_to_serial_with_the_plans_bytes() -> None:
    g = re_.graph()
    prog = lower(complete(g))
    assert sum(e.plan.total_bytes for e in prog.edges) == 49_152
    assert_mpi_equals_serial(g, random_feeds(prog, seed=5), prog=prog)


def test_a_contracted_dim_split_two_ways_is_settled_on_an_even_layout() -> None:
    # w's columns on a, v's rows on b: the matmul's rule co-shards the contracted 6 over a and
    # b, which 4 pieces do not split evenly; the answer given v alone (w's columns on b) plans
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
    with Graph("contested") as g:
        w, v = g.param("w", [2, 6]), g.param("v", [6, 2])
        ops.matmul(w, v, name="mm")
    shard(w, mesh, (None, "a"), priority=2)
    shard(v, mesh, ("b", None), priority=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sr.DroppedSplitWarning)  # w's split on a: reported
        r = complete(g)
    [e] = r.reshards
    assert (e.tensor, e.dst) == ("w", sr.DistAttr(mesh, [-1, 1]))
    assert r.attr("mm").partial == {1: "sum"}


def test_the_rules_answer_wins_a_tie() -> None:
    # the MLP's bias add needs the row-parallel sum reduced whatever operand is left free:
    # the plan is the rule's, one all-reduce
    mesh = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    r = complete(examples.mlp(mesh))
    [e] = r.reshards
    assert (e.tensor, e.op, e.dst) == ("fc2.matmul", "fc2.add", sr.DistAttr(mesh, [0, -1, -1]))


def test_an_operand_on_another_mesh_is_priced_on_the_ops_mesh() -> None:
    # a pipeline edge: h comes from stage 0, the matmul runs on stage 1 with w1 split on mp
    stage0 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    stage1 = sr.ProcessMesh([[4, 5], [6, 7]], dim_names=["dp", "mp"])
    with Graph("pp") as g:
        x = g.input("x", [8, 16])
        w0, w1 = g.param("w0", [16, 16]), g.param("w1", [16, 16])
        h = ops.relu(ops.matmul(x, w0), name="h")
        ops.matmul(h, w1, name="mm1")
    shard(x, stage0, ("dp", None))
    shard(w0, stage0, (None, "mp"))
    shard(w1, stage1, ("mp", None))
    r = complete(g)
    assert r.reshards_of("w1") == ()  # the annotated stage-1 weight is not moved
    [transfer] = r.reshards_of("h")
    assert transfer.cross_mesh
    assert np.isfinite(r.time)


def _add_of(x_dims: Any, w_dims: Any, n: int = 12) -> Graph:
    """y = x + w, [n, n] each, on a 2x4 (dp, mp) mesh: x annotated ``x_dims`` (None: not at
    all), w ``w_dims``."""
    with Graph("uneven-add") as g:
        x, w = g.input("x", [n, n]), g.param("w", [n, n])
        ops.add(x, w, name="y")
    mesh = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    if x_dims is not None:
        shard(x, mesh, x_dims)
    shard(w, mesh, w_dims)
    return g


def test_when_no_answer_fits_the_rules_answer_stands() -> None:
    # x and w annotated with co-shards of 6 over 8 on different dims: every answer, the rule's
    # and those with x or w free, needs a split that leaves a process an empty block (an
    # infinite price), so the tie goes to the rule's own answer, as before the cost settled
    # conflicts
    g = _add_of((("dp", "mp"), None), (None, ("mp", "dp")), n=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sr.DroppedSplitWarning)
        r = complete(g)
    assert [(e.tensor, e.side, e.dst.mapping_str()) for e in r.reshards] == [
        ("w", "operand", "[[0,1],-1]"), ("y", "result", "[-1,-1]")]
    assert r.bytes_moved == 1_132


def test_a_residual_block_at_an_uneven_batch_keeps_the_skip_connections_split() -> None:
    # resnet_block at batch 3 split on h (blocks of 2 and 1, which fit) and W on w, training:
    # the first batch norm reads its input whole (its statistics), so conv1's output is gathered
    # once and the branch runs replicated; the residual add takes the skip connection's layout,
    # a free slice of the branch, and x is never gathered. Before uneven splits fit, the branch
    # was priced with x's reshard at the add (24,960 B); before that, x was gathered (36,864 B)
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    r = complete(examples.resnet_block(mesh, layout="both", batch=3))
    split = sr.DistAttr(mesh, [0, -1, 1, -1])
    assert r.attr("x") == r.attr("conv1") == r.attr("residual") == split
    assert r.attr("bn2.out").is_replicated and r.reshards_of("x") == () and r.dropped == ()
    assert [(e.tensor, e.op) for e in r.reshards] == [
        ("conv1", "bn1"), ("bn2.out", "residual"), ("flatten", "head.matmul")]
    assert r.bytes_moved == 18_624


def _concat_moved_to_columns() -> Graph:
    with Graph("cat") as g:
        a, b = g.input("a", [8, 8]), g.input("b", [8, 8])
        ops.relu(ops.concat([a, b], axis=0, name="cat"), name="out")
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    shard(a, mesh, ("dp", None))
    shard(b, mesh, ("dp", None))
    return g


def _uneven_against_replicated() -> Graph:
    return _add_of(None, (("dp", "mp"), None))


#: the other plans the cost changed, by their result: (graph, loss tensor, processes)
CHANGED: dict[str, tuple[Callable[[], Graph], str, int]] = {
    "resnet-batch3": (lambda: examples.resnet_block(
        sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"]), layout="both", batch=3),
        "head.add", 4),
    "concat": (_concat_moved_to_columns, "out", 4),
    "uneven-add": (_uneven_against_replicated, "y", 8),
}


def _feeds(g: Graph, seed: int) -> tuple[Program, dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sr.DroppedSplitWarning)
        prog = lower(complete(g))
    feeds = random_feeds(prog, seed=seed)
    for k in feeds:
        if k.endswith("running_var"):
            feeds[k] = np.abs(feeds[k]) + 0.5  # a variance
    return prog, feeds


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(CHANGED))
def test_the_plans_the_cost_changed_run_equal_to_serial_forward_and_gradients(case: str) -> None:
    build, loss, _ = CHANGED[case]
    g = build()
    prog, feeds = _feeds(g, 6)
    assert_simulated_equals_serial(g, feeds, prog=prog, loss=loss)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(CHANGED))
def test_the_plans_the_cost_changed_run_on_mpi_equal_to_serial(case: str) -> None:
    build, _, nprocs = CHANGED[case]
    g = build()
    prog, feeds = _feeds(g, 7)
    assert_mpi_equals_serial(g, feeds, prog=prog, nprocs=nprocs)


def _upconv(x_dims: tuple[Any, ...], out_dims: tuple[Any, ...] | None) -> Completion:
    """A 2x2 stride-2 transposed conv (U-Net's up path) whose input comes channel-split (a
    layout the op refuses: its input channels are summed) and whose result is annotated."""
    mesh = sr.ProcessMesh(list(range(4)), dim_names=["x"])
    with Graph("upconv") as g:
        x = g.input("x", [8, 64, 8, 8])
        w = g.param("w", [64, 32, 2, 2])
        y = ops.conv2d_transpose(x, w, strides=(2, 2), name="up")
    shard(x, mesh, x_dims)
    shard(w, mesh, (None,) * 4)
    if out_dims is not None:
        shard(y, mesh, out_dims)
    return complete(g)


def test_a_refused_operand_is_resharded_into_the_split_its_annotated_result_needs() -> None:
    # The rule refuses x split on C_in. Keeping the replicated weight alone gathers x, runs the
    # conv on every process and slices the result to its annotated batch split; keeping the
    # annotated result moves x by one all-to-all (C_in split -> N split) and runs it split
    r = _upconv((None, "x", None, None), ("x", None, None, None))
    assert [(e.tensor, e.side, e.src.mapping_str(), e.dst.mapping_str()) for e in r.reshards] \
        == [("x", "operand", "[-1,0,-1,-1]", "[0,-1,-1,-1]")]
    assert [s.kind for p in r.plans() for s in p.steps] == ["all_to_all"]
    gathered = _upconv((None, "x", None, None), None)  # nothing fixes the result: gathered
    assert [e.dst.mapping_str() for e in gathered.reshards] == ["[-1,-1,-1,-1]"]
    assert r.plans()[0].time < gathered.plans()[0].time
    assert "its result up as annotated" in explain(r, "x")
    prog = lower(r)
    assert_simulated_equals_serial(r.graph, random_feeds(prog, seed=0), prog=prog, loss="up")


def _halves(x_dims: tuple[Any, ...], out_dims: tuple[Any, ...] | None) -> Completion:
    """An op of one operand (a split into halves along dim 1, Mixtral's gate/up split of its
    experts' product) given its operand split on that dim, a layout its rule refuses (the
    halves would each lose their split), and its results annotated."""
    mesh = sr.ProcessMesh(list(range(4)), dim_names=["x"])
    with Graph("halves") as g:
        x = g.input("x", [64, 32])
        a, b = ops.split(x, sections=(16, 16), axis=1, name="halves")
        ops.multiply(a, b, name="gated")
    shard(x, mesh, x_dims)
    if out_dims is not None:
        shard(a, mesh, out_dims)
        shard(b, mesh, out_dims)
    return complete(g)


def test_an_op_of_one_operand_is_resharded_into_the_split_its_annotated_results_need() -> None:
    # Its rule's answer gathers x whole and slices both halves to their annotated row split;
    # the halves' own need moves x by one all-to-all (column split -> row split), as the solver
    # of spmdrules.auto prices it (Mixtral's experts: 1.6 ms a layer, 2% of the step)
    r = _halves((None, "x"), ("x", None))
    assert [(e.tensor, e.side, e.src.mapping_str(), e.dst.mapping_str()) for e in r.reshards] \
        == [("x", "operand", "[-1,0]", "[0,-1]")]
    assert [s.kind for p in r.plans() for s in p.steps] == ["all_to_all"]
    gathered = _halves((None, "x"), None)  # nothing fixes the halves: x is gathered
    assert [e.dst.mapping_str() for e in gathered.reshards] == ["[-1,-1]"]
    assert r.plans()[0].time < gathered.plans()[0].time
    assert "[0,-1] (demand of halves)" in explain(r, "x")
    prog = lower(r)
    assert_simulated_equals_serial(r.graph, random_feeds(prog, seed=0), prog=prog, loss="gated")
