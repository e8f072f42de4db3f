"""Dropped splits (issue 24): ``complete`` warns once per split it drops, with a category users
can filter, naming the tensor, the mesh dim, the tensor dim and the reason in ``explain``'s
words; ``summary()``, ``explain`` and the command line list them; the examples' standard plans
drop none."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.cli import main
from spmdrules.completion import Completion, DroppedSplit, complete
from spmdrules.completion.explain import explain
from spmdrules.graph.annotate import shard
from spmdrules.graph.exchange import dump
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
SMALL = {"seq": 16, "hidden": 32, "ffn": 64}
DIVISIBILITY = "divisibility: it does not split the tensor's dims evenly"


def completed(g: Graph) -> tuple[Completion, list[warnings.WarningMessage]]:
    """``complete(g)`` and every DroppedSplitWarning it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = complete(g)
    return r, [w for w in caught if issubclass(w.category, sr.DroppedSplitWarning)]


def relu_chain(rows: int) -> tuple[Graph, Tensor, Tensor, Tensor]:
    """x [rows, 8] -> relu y -> relu z, x split on rows over dp."""
    with Graph("chain") as g:
        x = g.input("x", [rows, 8])
        y = ops.relu(x, name="y")
        z = ops.relu(y, name="z")
    shard(x, MESH, ("dp", None))
    return g, x, y, z


def test_batch_7_on_dp_2_warns_where_the_split_is_dropped() -> None:
    r, caught = completed(examples.mlp(MESH, batch=7, **SMALL))
    # once, at the first matmul: not again at the bias add, gelu or the second matmul, which
    # only inherit the replicated batch
    [w] = caught
    assert w.category is sr.DroppedSplitWarning and issubclass(w.category, UserWarning)
    assert w.filename == __file__  # attributed to complete's caller
    [d] = r.dropped
    assert d == DroppedSplit("fc1.matmul", "fc1.matmul", "result", ("dp",), 0, (7, 16, 64),
                             sr.DistAttr(MESH, [0, -1, 1]), sr.DistAttr(MESH, [-1, -1, 1]),
                             DIVISIBILITY)
    text = str(w.message)
    assert text == str(d)
    for part in ("'fc1.matmul'", "mesh dim 'dp'", "(tensor dim 0)", "at op 'fc1.matmul'",
                 f"why: {DIVISIBILITY}", "a size divisible by 2 keeps the split"):
        assert part in text, part
    # the reason is explain's, word for word
    assert f"{DIVISIBILITY}" in explain(r, "fc1.matmul")
    assert f"dropped split: {d}" in explain(r, "fc1.matmul")
    assert "dropped split" not in explain(r, "gelu")


def test_the_warning_can_be_made_an_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.DroppedSplitWarning)
        with pytest.raises(sr.DroppedSplitWarning, match=r"'dp' \(tensor dim 0\)"):
            complete(examples.mlp(MESH, batch=7, **SMALL))
        complete(examples.mlp(MESH, batch=8, **SMALL))  # nothing dropped: no error


def test_summary_lists_the_dropped_splits() -> None:
    r, _ = completed(examples.mlp(MESH, batch=7, **SMALL))
    lines = r.summary().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  dropped splits 1 "))
    assert lines[at + 1].split() == ["tensor", "at", "op", "mesh", "dims", "dim", "rule", "makes",
                                     "laid", "out", "why"]
    assert lines[at + 3].split()[:6] == ["fc1.matmul", "fc1.matmul", "dp", "0", "[0,-1,1]",
                                         "[-1,-1,1]"]
    assert lines[at + 3].endswith(DIVISIBILITY)
    r8, _ = completed(examples.mlp(MESH, batch=8, **SMALL))
    assert "dropped" not in r8.summary()


STANDARD_PLANS: dict[str, Callable[[], Graph]] = {
    "mlp": lambda: examples.mlp(MESH, **SMALL),
    "gpt_decoder": lambda: examples.gpt_decoder(2, MESH),
    "llama_decoder": lambda: examples.llama_decoder(2, MESH),
    "llama_decoder fused": lambda: examples.llama_decoder(2, MESH, fused=True),
    # batch_norm's batch statistics need the batch and space whole (Paddle's rule keeps the
    # channel split only), even for the activation alone: the op cannot keep them, no drop
    "resnet_block data": lambda: examples.resnet_block(MESH, layout="data"),
    "resnet_block spatial": lambda: examples.resnet_block(MESH, layout="spatial"),
    "resnet_block both": lambda: examples.resnet_block(MESH, layout="both"),
}


@pytest.mark.parametrize("name", sorted(STANDARD_PLANS))
def test_the_examples_standard_plans_drop_nothing(name: str) -> None:
    r, caught = completed(STANDARD_PLANS[name]())
    assert r.dropped == () and caught == []
    # they do reshard (pending sums reduced, batch_norm's gathers): none of that is a drop
    assert r.reshards


def test_a_pending_sum_reduced_by_choice_is_not_a_drop() -> None:
    # LLaMA's vocabulary-parallel embedding makes a pending sum over mp, and completion reduces
    # it at once (the cheaper place): a reduction placed, not a split dropped
    r, caught = completed(examples.llama_decoder(1, MESH))
    [edge] = [e for e in r.reshards if e.tensor == "embed"]
    assert edge.src.partial and not edge.dst.partial
    assert caught == []


def test_a_conflict_that_gathers_an_operand_is_reported_with_the_rules_words() -> None:
    # add: x split on its rows over dp, y (ranked higher) over mp; the rule cannot take both on
    # one broadcast dim, keeps y's and gathers x's dp, which the result does not keep. With x
    # alone the rule keeps dp: the other operand made the op drop it.
    with Graph("conflict") as g:
        x, y = g.input("x", [8, 8]), g.param("y", [8, 8])
        ops.relu(ops.add(x, y, name="sum"), name="out")
    shard(x, MESH, ("dp", None))
    shard(y, MESH, ("mp", None), priority=1)
    r, caught = completed(g)
    [d] = r.dropped
    assert (d.tensor, d.op, d.side, d.mesh_dims, d.dim) == ("x", "sum", "operand", ("dp",), 0)
    assert d.got == sr.DistAttr(MESH, [1, -1])
    assert d.reason.startswith("rule: add cannot take it together with its other operands")
    assert d.reason.endswith("the op keeps y and reshards this operand")
    [w] = caught
    assert "its rule keeps the split given 'x' [8, 8] ([0,-1]) alone" in str(w.message)


def concat_of_batch_split(cols: int) -> Graph:
    """relu(concat([a, b], axis=0)), a and b [8, cols] split on rows over dp."""
    with Graph("cat") as g:
        a, b = g.input("a", [8, cols]), g.input("b", [8, cols])
        ops.relu(ops.concat([a, b], axis=0, name="cat"), name="out")
    shard(a, MESH, ("dp", None))
    shard(b, MESH, ("dp", None))
    return g


def test_a_concat_of_two_batch_split_operands_drops_the_split() -> None:
    # Paddle's concat rule replicates when every operand is split on the concat axis, though
    # with one of them alone it moves the split to another dim (3 columns: not evenly, so
    # completion cannot take that): reported once, at the op
    r, caught = completed(concat_of_batch_split(3))
    [d] = r.dropped
    assert (d.tensor, d.op, d.side, d.mesh_dims) == ("a", "cat", "operand", ("dp",))
    assert d.reason == "rule: cat's rule needs [-1,-1] given its other operands"
    assert len(caught) == 1


def test_a_concat_of_two_batch_split_operands_keeps_the_split_where_it_moves_evenly() -> None:
    # 8 columns: the answer given one operand alone moves dp to the columns, and the cost
    # takes it (two all-to-alls, 256 B, against two all-gathers, 1 KB): nothing is dropped
    r, caught = completed(concat_of_batch_split(8))
    assert r.dropped == () and caught == []
    assert r.attr("cat") == sr.DistAttr(MESH, [-1, 0])
    assert [s.kind for p in r.plans() for s in p.steps] == ["all_to_all", "all_to_all"]
    assert r.bytes_moved == 512


def test_a_result_annotated_without_the_split_is_the_users_choice() -> None:
    g, _, y, _ = relu_chain(7)
    shard(y, MESH, (None, None))
    r, caught = completed(g)
    assert r.reshards and r.dropped == () and caught == []


def test_a_higher_priority_annotation_downstream_is_named_as_the_reason() -> None:
    # y's forward offer keeps dp; z's annotation (priority 1) reaches y replicated through
    # the reverse rule: the drop is at y, and the reason is the priority
    g, _, _, z = relu_chain(8)
    shard(z, MESH, (None, None), priority=1)
    r, caught = completed(g)
    [d] = r.dropped
    assert (d.tensor, d.op, d.side, d.mesh_dims, d.dim) == ("y", "y", "result", ("dp",), 0)
    assert d.reason == "priority: it carried priority 0 (inferred) against 1"
    assert "Annotating 'y' with the split keeps it" in str(caught[0].message)


def test_a_co_shard_dropped_whole_is_one_split_over_both_mesh_dims() -> None:
    # 6 rows over a x b = 4 pieces is uneven (6 over 2 alone would not be): one warning, for
    # the split of dim 0, naming both mesh dims, major first, and the 4 pieces
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
    with Graph("co-shard") as g:
        x = g.param("x", [6, 3])
        ops.relu(ops.relu(x, name="y"), name="z")
    shard(x, mesh, (("a", "b"), None))
    r, caught = completed(g)
    [d] = r.dropped
    assert (d.tensor, d.mesh_dims, d.dim) == ("y", ("a", "b"), 0)
    [w] = caught
    assert "over mesh dims 'a', 'b' (tensor dim 0)" in str(w.message)
    assert "Dim 0 is 6, which 4 pieces do not split evenly" in str(w.message)


def test_an_even_split_refused_with_an_uneven_one_says_which_dim_is_uneven() -> None:
    # batch 3 on h, width 8 on w: the conv's layout is refused whole, so w goes with h. Each is
    # its own split; the residual add drops h again, as the skip connection brings x's back,
    # and keeps w (the add's answer given the branch alone, priced below the gather)
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    r, caught = completed(examples.resnet_block(mesh, layout="both", batch=3))
    assert [(d.tensor, d.mesh_dims, d.dim) for d in r.dropped] == [
        ("conv1", ("h",), 0), ("conv1", ("w",), 2), ("x", ("h",), 0)]
    assert len(caught) == 3
    batch, width = (str(w.message) for w in caught[:2])
    assert "Dim 0 is 3, which 2 pieces do not split evenly" in batch
    assert ("Dim 2 splits evenly, but the rule's layout is refused whole for dim 0 (3 over 2 "
            "pieces)") in width


def test_an_odd_pooled_extent_drops_the_spatial_splits_at_the_pool() -> None:
    # issue 24's CNN case: 14 x 14 split on H and W, pooled 3x3/2 to 7 x 7, which 2 pieces do not
    # split: dropped at the pool, once each, not again at the layers after it
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    r, caught = completed(examples.resnet_block(mesh, layout="spatial", size=14))
    assert [(d.tensor, d.op, d.mesh_dims, d.dim) for d in r.dropped] == [
        ("maxpool", "maxpool", ("h",), 2), ("maxpool", "maxpool", ("w",), 3)]
    assert "Dim 2 is 7, which 2 pieces do not split evenly" in str(caught[0].message)


def test_a_mesh_dim_name_with_terminal_controls_reaches_the_warning_escaped() -> None:
    # tensor and op names are checked when the graph is built; mesh dim names are not
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp\x1b[31m", "mp"])
    _, caught = completed(examples.mlp(mesh, batch=7, **SMALL))
    [w] = caught
    assert "\x1b" not in str(w.message) and "dp\\x1b[31m" in str(w.message)


def test_the_command_line_lists_them_and_prints_no_raw_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "mlp7.json"
    dump(examples.mlp(MESH, batch=7, **SMALL), model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.DroppedSplitWarning)  # the CLI must not raise one
        assert main(["complete", str(model)]) == 0
        out = capsys.readouterr()
        assert "dropped splits 1 " in out.out and DIVISIBILITY in out.out
        assert "DroppedSplitWarning" not in out.err
        assert main(["explain", str(model), "fc1.matmul"]) == 0
        assert "dropped split: completion drops the split of 'fc1.matmul'" in (
            capsys.readouterr().out)
