"""Completion: Megatron layouts on the examples, determinism, policy cases, errors."""

from __future__ import annotations

from typing import Any

import pytest
from graph_copies import rebuild_shuffled
from hypothesis import given, settings
from hypothesis import strategies as st

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.completion import Completion, CompletionError, NoAnnotationError, complete
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "ffn": 64, "vocab": 128}


def A(mapping: list[Any], partial: dict[int, str] | None = None, mesh: sr.ProcessMesh = MESH
      ) -> sr.DistAttr:
    if any(isinstance(m, list) for m in mapping):
        return sr.DistAttr(mesh, multi_dims_mapping=[m if isinstance(m, list) else
                                                     ([] if m == -1 else [m]) for m in mapping],
                           partial=partial)
    return sr.DistAttr(mesh, dims_mapping=mapping, partial=partial)


# ---- Megatron layouts ------------------------------------------------------------------------
def test_mlp_tensor_by_tensor() -> None:
    g = examples.mlp(MESH)
    r = complete(g)
    want = {
        "x": A([0, -1, -1]),
        "fc1.weight": A([-1, 1]),
        "fc1.bias": A([1]),
        "fc1.matmul": A([0, -1, 1]),
        "fc1.add": A([0, -1, 1]),
        "gelu": A([0, -1, 1]),
        "fc2.weight": A([1, -1]),
        "fc2.matmul": A([0, -1, -1], {1: "sum"}),  # row-parallel: a pending sum over mp
        "fc2.bias": A([-1]),
        "fc2.add": A([0, -1, -1]),
    }
    assert {t.name: t.attr for t in g.tensors} == want
    assert {n: r.attr(n) for n in want} == want
    # the one reshard: the partial output reduced once, before the bias add
    [e] = r.reshards
    assert (e.tensor, e.op, e.side) == ("fc2.matmul", "fc2.add", "operand")
    [step] = e.plan().steps
    assert step.kind == "all_reduce" and step.mesh_dim == 1
    assert r.origin("fc2.bias").kind == "demand" and r.origin("gelu").kind == "forward"
    assert r.num_annotated == 4 and r.num_inferred == 6


GPT_LAYER: dict[str, tuple[list[Any], dict[int, str] | None]] = {
    "ln1.out": ([0, -1, -1], None),
    "qkv.matmul": ([0, -1, 1], None),              # column-parallel
    "qkv.add": ([0, -1, 1], None),
    "attn.reshape": ([0, -1, 1, -1], None),        # heads split on mp
    "attn.transpose": ([0, 1, -1, -1], None),
    "attn.split.0": ([0, 1, -1, -1], None),
    "attn.split.1": ([0, 1, -1, -1], None),
    "attn.split.2": ([0, 1, -1, -1], None),
    "attn.scores": ([0, 1, -1, -1], None),
    "attn.scale": ([0, 1, -1, -1], None),
    "attn.softmax": ([0, 1, -1, -1], None),
    "attn.context": ([0, 1, -1, -1], None),
    "attn.transpose_back": ([0, -1, 1, -1], None),
    "attn.merge": ([0, -1, 1], None),
    "out.matmul": ([0, -1, -1], {1: "sum"}),       # row-parallel: partial
    "out.add": ([0, -1, -1], None),
    "residual1": ([0, -1, -1], None),
    "ln2.out": ([0, -1, -1], None),
    "fc1.matmul": ([0, -1, 1], None),
    "fc1.add": ([0, -1, 1], None),
    "gelu": ([0, -1, 1], None),
    "fc2.matmul": ([0, -1, -1], {1: "sum"}),
    "fc2.add": ([0, -1, -1], None),
    "residual2": ([0, -1, -1], None),
    "ln1.scale": ([-1], None),
    "ln1.bias": ([-1], None),
    "out.bias": ([-1], None),
    "fc2.bias": ([-1], None),
}


def test_gpt_one_layer_tensor_by_tensor() -> None:
    g = examples.gpt_decoder(1, MESH, **SMALL)
    r = complete(g)
    for part, (mapping, partial) in GPT_LAYER.items():
        assert r.attr(f"layers.0.{part}") == A(mapping, partial), part
    assert r.attr("embed.word_lookup") == A([0, -1, -1], {1: "sum"})  # vocab-parallel lookup
    assert r.attr("lm_head.matmul") == A([0, -1, 1])
    assert r.attr("loss.cross_entropy.softmax_out") == A([0, -1, 1])
    assert [(e.tensor, e.op) for e in r.reshards] == [
        ("embed.word_lookup", "embed.add"),
        ("layers.0.out.matmul", "layers.0.out.add"),
        ("layers.0.fc2.matmul", "layers.0.fc2.add"),
    ]
    assert all([s.kind for s in p.steps] == ["all_reduce"] for p in r.plans())
    assert r.converged


@pytest.mark.parametrize("layers", [4, 12])
def test_gpt_many_layers_by_counts(layers: int) -> None:
    g = examples.gpt_decoder(layers, MESH, **SMALL)
    r = complete(g)
    # two all-reduces per block (after the row-parallel matmuls) plus the vocab-parallel lookup
    assert len(r.reshards) == 2 * layers + 1
    assert sum(1 for e in r.reshards if e.tensor.endswith((".out.matmul", ".fc2.matmul"))) == \
        2 * layers
    heads = [t for t in g.tensors if t.name.endswith("attn.softmax")]
    assert len(heads) == layers and all(t.attr == A([0, 1, -1, -1]) for t in heads)
    assert r.num_annotated == 6 * layers + 6
    assert r.num_annotated + r.num_inferred == g.num_tensors
    # each op's forward rule runs about once: the worklist does not revisit a settled model
    assert r.rule_calls <= 1.3 * g.num_ops and r.iterations <= 3


def test_result_prints_as_a_table() -> None:
    r = complete(examples.mlp(MESH))
    text = str(r)
    assert "fc2.matmul" in text and "[Shard(0), Partial()]" in text
    assert "reshards 1" in text and "all-reduce(mp)" in text
    assert "annotated 4, inferred 6" in r.summary()
    assert r.bytes_moved == r.plans()[0].total_bytes > 0


# ---- determinism and termination ----------------------------------------------------------
def _fingerprint(r: Completion) -> Any:
    return ({t.name: r.attr(t) for t in r.graph.tensors},
            [(e.tensor, e.op, e.side, e.src, e.dst) for e in r.reshards],
            r.iterations, r.rule_calls)


REFERENCE = examples.gpt_decoder(2, MESH, **SMALL)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_insertion_order_does_not_matter(seed: int) -> None:
    want = _fingerprint(complete(REFERENCE))
    assert _fingerprint(complete(rebuild_shuffled(REFERENCE, seed))) == want


def test_running_again_gives_the_same_result() -> None:
    g = examples.gpt_decoder(2, MESH, **SMALL)
    first = _fingerprint(complete(g))
    assert _fingerprint(complete(g)) == first             # from the completed state
    assert _fingerprint(complete(g.reset_attrs())) == first


def test_annotations_are_never_written() -> None:
    g = examples.gpt_decoder(1, MESH, **SMALL)
    before = {t.name: t.annotation for t in g.tensors}
    complete(g)
    assert {t.name: t.annotation for t in g.tensors} == before


# ---- policy cases --------------------------------------------------------------------------
def _chain(prio_x: int, prio_z: int) -> Graph:
    with Graph("chain") as g:
        x = g.input("x", [8, 16])
        y = ops.relu(x, name="y")
        z = ops.relu(y, name="z")
        ops.exp(z, name="out")
    shard(x, MESH, ("dp", None), priority=prio_x)
    shard(z, MESH, (None, "dp"), priority=prio_z)
    return g


def test_priority_higher_annotation_wins_the_tensors_between() -> None:
    r = complete(_chain(0, 1))
    assert r.attr("y") == A([-1, 0])                 # pulled by z's higher priority
    assert r.origin("y").kind == "reverse" and r.origin("y").priority == 1
    assert r.attr("x") == A([0, -1])                  # annotations are never overwritten
    [e] = r.reshards                                  # relu runs on x's layout, then moves
    assert (e.tensor, e.op, e.side) == ("y", "y", "result")
    assert [s.kind for s in e.plan().steps] == ["all_to_all"]
    lost = {(x.offer.kind, x.reason) for x in r.rejected("y")}
    assert ("forward", "priority") in lost


def test_priority_the_other_way_round() -> None:
    r = complete(_chain(1, 0))
    assert r.attr("y") == A([0, -1])
    [e] = r.reshards
    assert (e.tensor, e.op, e.side) == ("z", "z", "result")
    assert any(x.reason == "priority" for x in r.rejected("y"))


def test_equal_priority_keeps_the_producer_and_reshards_once() -> None:
    r = complete(_chain(0, 0))
    assert r.attr("y") == A([0, -1])
    assert len(r.reshards) == 1


def test_conflicting_operands_keep_the_higher_priority_one() -> None:
    with Graph("conflict") as g:
        a = g.input("a", [8, 16])
        b = g.input("b", [8, 16])
        ops.add(a, b, name="sum")
    shard(a, MESH, ("dp", None))
    shard(b, MESH, ("mp", None), priority=1)
    r = complete(g)
    assert r.attr("sum") == A([1, -1])
    [e] = r.reshards
    assert (e.tensor, e.op, e.dst) == ("a", "sum", A([1, -1]))
    assert [x.reason for x in r.rejected("a")] == ["rule"]


def test_conflict_at_equal_priority_is_settled_by_cost() -> None:
    with Graph("conflict2") as g:
        a = g.input("a", [8, 16])
        b = g.input("b", [8, 16])
        ops.add(a, b, name="sum")
    shard(a, MESH, ("dp", None))
    shard(b, MESH, ("mp", None))
    r = complete(g)
    # either way one operand moves; the cheaper move is kept, and the answer is deterministic
    [e] = r.reshards
    other = "b" if e.tensor == "a" else "a"
    assert r.attr("sum") == r.attr(other)
    assert e.plan().time <= complete(g).reshards[0].plan().time


def test_partial_annotation_is_reduced_for_a_consumer_that_needs_it() -> None:
    with Graph("partial") as g:
        p = g.input("p", [8, 16])
        ops.exp(p, name="e")
    shard(p, MESH, ("dp", None), partial={"mp": "sum"})
    r = complete(g)
    [e] = r.reshards
    assert e.src.partial == {1: "sum"} and not e.dst.partial
    assert [s.kind for s in e.plan().steps] == ["all_reduce"]


def test_reverse_propagation_from_an_annotated_output() -> None:
    with Graph("rev") as g:
        x = g.input("x", [8, 16])
        w = g.param("w", [16, 4])
        y = ops.matmul(ops.relu(x, name="r"), w, name="y")
    shard(y, MESH, ("dp", None))
    r = complete(g)
    assert r.attr("x") == A([0, -1]) and r.attr("r") == A([0, -1])
    assert r.origin("x").kind == "reverse"
    assert r.reshards == ()


def test_open_dims_are_filled_and_closed_dims_kept() -> None:
    def build(spec: Any, **kw: Any) -> Completion:
        with Graph("oc") as g:
            x = g.input("x", [8, 16])
            w = g.param("w", [16, 32])
            y = ops.matmul(x, w, name="y")
            ops.exp(y, name="e")
        shard(x, MESH, ("dp", None))
        shard(w, MESH, (None, "mp"))
        shard(y, MESH, spec, **kw)
        return complete(g)

    r = build(("dp", OPEN))
    assert r.attr("y") == A([0, 1]) and r.reshards == ()
    assert r.origin("y").kind == "annotation" and "open dims" in r.origin("y").note
    r = build(("dp", None))                          # closed: kept, the result is gathered
    assert r.attr("y") == A([0, -1])
    [e] = r.reshards
    assert (e.side, e.src, e.dst) == ("result", A([0, 1]), A([0, -1]))
    assert [s.kind for s in e.plan().steps] == ["all_gather"]
    r = build(("dp", None), closed=False)            # a hint of the same priority holds
    assert r.attr("y") == A([0, -1])
    r = build(None)                                  # everything open
    assert r.attr("y") == A([0, 1])


def test_uneven_offers_that_fit_are_kept() -> None:
    # issue 24: 6 over mp=4 is uneven (2, 2, 1, 1) but leaves no process empty: relu runs on
    # x's blocks and y keeps the split, with no reshard
    with Graph("uneven") as g:
        x = g.input("x", [8, 6])
        ops.relu(x, name="y")
    shard(x, MESH, (None, "mp"))
    r = complete(g)
    assert r.attr("y") == A([-1, 1]) and r.reshards == () and r.rejected("y") == ()


def test_an_uneven_co_shard_that_fits_is_kept() -> None:
    # 12 rows over dp x mp = 8 pieces (2, 2, 2, 2, 1, 1, 1, 1): the add keeps the co-shard
    with Graph("uneven2") as g:
        w = g.param("w", [12, 12])
        ops.add(w, w, name="y")
    shard(w, MESH, (("dp", "mp"), None))
    r = complete(g)
    assert r.attr("y") == A([[0, 1], -1]) and r.origin("y").kind == "forward"
    assert ("y", "result") not in [(e.tensor, e.side) for e in r.reshards]


def test_a_result_whose_only_offer_does_not_fit_is_replicated() -> None:
    # the annotation was checked against 16 columns; shrunk to 2, mp's 4 pieces no longer fit
    # the relu's result (a process would hold nothing): refused, and the result replicated
    with Graph("shrunk") as g:
        x = g.input("x", [8, 16])
        y = ops.relu(x, name="y")
    shard(x, MESH, (None, "mp"))
    x.shape, y.shape = (8, 2), (8, 2)
    r = complete(g)
    assert r.attr("y").is_replicated and r.origin("y").kind == "default"
    assert [x.reason for x in r.rejected("y")] == ["divisibility"]
    [d] = r.dropped
    assert (d.tensor, d.mesh_dims, d.dim) == ("y", ("mp",), 1)
    assert "Dim 1 is 2, shorter than its 4 pieces" in str(d)


def test_an_uneven_split_against_a_replicated_operand_is_settled_on_the_even_layout() -> None:
    # x, which nothing reaches, is replicated; the add's rule passes w's split on to x and y:
    # 6 rows over dp x mp's 8 pieces, which leaves two processes an empty block. Priced, that
    # answer is infinite (no layout that fits), while the answer given x alone (w gathered)
    # plans: the add takes it, and y is made replicated, with no reshard of its own
    with Graph("uneven2") as g:
        x = g.input("x", [6, 12])
        w = g.param("w", [6, 12])
        ops.add(x, w, name="y")
    shard(w, MESH, (("dp", "mp"), None))
    r = complete(g)
    assert r.attr("y").is_replicated and r.origin("y").kind == "forward"
    [e] = r.reshards
    assert (e.tensor, e.side, e.dst) == ("w", "operand", A([-1, -1]))
    assert [(d.tensor, d.side) for d in r.dropped] == [("w", "operand")]


def test_a_shape_changed_between_runs_is_seen_by_the_next_run() -> None:
    # completion keeps per-topology arrays (shapes among them) across runs on one graph
    with Graph("reshaped") as g:
        x = g.input("x", [8, 16])
        y = ops.relu(x, name="y")
    shard(x, MESH, (None, "mp"))
    assert complete(g).attr("y") == A([-1, 1])
    x.shape, y.shape = (8, 2), (8, 2)                 # 2 is shorter than mp's 4 pieces
    r = complete(g.reset_attrs())
    assert r.attr("y").is_replicated and [e.tensor for e in r.reshards] == ["y"]


def test_unreached_components_default_to_replicated() -> None:
    with Graph("two") as g:
        x = g.input("x", [8, 16])
        ops.relu(x, name="y")
        u = g.input("u", [4, 4])
        ops.exp(u, name="v")
    shard(x, MESH, ("dp", None))
    r = complete(g)
    assert r.attr("v") == A([-1, -1]) and r.origin("u").kind == "default"
    assert r.num_default == 1


# ---- pipeline stages ------------------------------------------------------------------------
STAGE0 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
STAGE1 = sr.ProcessMesh([[4, 5], [6, 7]], dim_names=["dp", "mp"])


def test_cross_mesh_transfer_at_the_stage_boundary() -> None:
    with Graph("pp") as g:
        x = g.input("x", [8, 16])
        w0 = g.param("w0", [16, 16])
        w1 = g.param("w1", [16, 16])
        h = ops.relu(ops.matmul(x, w0, name="mm0"), name="h")
        ops.relu(ops.matmul(h, w1, name="mm1"), name="out")
    shard(x, STAGE0, ("dp", None))
    shard(w0, STAGE0, (None, "mp"))
    shard(w1, STAGE1, ("mp", None))
    r = complete(g)
    assert r.attr("h").mesh == STAGE0 and r.attr("mm1").mesh == STAGE1
    assert r.attr("out").mesh == STAGE1
    [e] = r.reshards_of("h")
    assert e.cross_mesh and e.op == "mm1"
    kinds = [s.kind for s in e.plan().steps]
    assert "p2p" in kinds
    assert sum(1 for x in r.reshards if x.cross_mesh) == 1


def test_unannotated_params_follow_their_consumers_mesh() -> None:
    with Graph("pp2") as g:
        x = g.input("x", [8, 16])
        b = g.param("b", [16])
        ops.add(x, b, name="y")
    shard(x, STAGE1, ("dp", None))
    r = complete(g)
    assert r.attr("b").mesh == STAGE1 and r.reshards == ()


# ---- errors ------------------------------------------------------------------------------------
def test_no_annotation_is_a_precise_error() -> None:
    g = examples.mlp(MESH, annotate=False)
    with pytest.raises(NoAnnotationError, match="annotate at least one tensor"):
        complete(g)


def test_not_a_graph() -> None:
    with pytest.raises(CompletionError, match="expected a Graph"):
        complete("model.json")  # type: ignore[arg-type]


def test_errors_are_spmd_errors() -> None:
    assert issubclass(NoAnnotationError, sr.SpmdError)


def test_tensors_that_did_not_converge_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 16, item 4: a completion cut off by the change guard said only "NOT converged"."""
    from spmdrules import examples
    from spmdrules.completion import sweeps
    from spmdrules.completion.explain import explain

    monkeypatch.setattr(sweeps, "MAX_CHANGES", 0)  # every second change freezes the tensor
    g = examples.gpt_decoder(1, MESH, batch=2, seq=8, hidden=16, heads=2, ffn=32, vocab=64)
    r = complete(g)
    assert not r.converged and r.unconverged
    text = r.summary()
    assert "not converged: " + r.unconverged[0] in text and "kept their last attribute" in text
    assert "NOT converged" in explain(r, r.unconverged[0])
    lower_ok = [e.plan(r.cost) for e in r.reshards]  # the frozen state is consistent: it plans
    assert len(lower_ok) == len(r.reshards)


def test_a_summary_lists_edges_without_a_plan_instead_of_raising(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spmdrules.completion import result
    from spmdrules.completion.reshard_plans import ReshardError

    def no_plan(*_: Any, **__: Any) -> Any:
        raise ReshardError("plan_reshard: no plan takes it there")

    with Graph("careless") as g:
        x = g.input("x", [8, 8])
        ops.relu(x, name="y")
    shard(x, MESH, ("dp", "mp"))
    shard(g.tensor("y"), MESH, ("mp", None))
    r = complete(g)
    assert r.reshards
    monkeypatch.setattr(result, "plan_reshard", no_plan)
    text = r.summary()
    assert "with no plan (listed)" in text and "no plan: no plan takes it there" in text
    assert [e.tensor for e, _ in r.unplannable()] == [e.tensor for e in r.reshards]
