"""Dropped splits (issue 24): ``complete`` warns once per split it drops, with a category users
can filter, naming the tensor, the mesh dim, the tensor dim and the reason in ``explain``'s
words; ``summary()``, ``explain`` and the command line list them; the examples' standard plans
drop none."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
EXTENT = ("extent: its result 'pool' [4, 8, 1, 1] has dim 2 of length 1, shorter than the "
          "split's 2 pieces, so the op's rule reads the dim whole")


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


def collapsing(mesh: sr.ProcessMesh = MESH, height: int = 2) -> Graph:
    """x [4, 8, height, 2], the batch on dp and H on mp, pooled 2x2/2 then a relu: issue 24's
    CNN whose spatial extent collapses below the mesh (H 2 -> 1 on mp = 2)."""
    with Graph("collapse") as g:
        x = g.input("x", [4, 8, height, 2])
        ops.relu(ops.pool2d(x, kernel_size=[2, 2], strides=[2, 2], name="pool"), name="out")
    shard(x, mesh, (0, None, 1, None))  # by position: a test renames the mesh dims
    return g


def test_batch_7_on_dp_2_keeps_its_uneven_split() -> None:
    # issue 24: blocks of 4 and 3 rows leave no process empty, so every layer keeps the split
    r, caught = completed(examples.mlp(MESH, batch=7, **SMALL))
    assert r.dropped == () and caught == []
    assert r.attr("fc1.matmul") == sr.DistAttr(MESH, [0, -1, 1])
    assert r.attr("fc2.add").multi_dims_mapping[0] == (0,)


def test_a_collapsing_extent_warns_where_the_split_is_dropped() -> None:
    r, caught = completed(collapsing())
    # once, at the pool, for mp alone: the batch split stays (issue 24), and the relu after it
    # only inherits H whole
    [w] = caught
    assert w.category is sr.DroppedSplitWarning and issubclass(w.category, UserWarning)
    assert w.filename == __file__  # attributed to complete's caller
    [d] = r.dropped
    assert d == DroppedSplit("x", "pool", "operand", ("mp",), 2, (4, 8, 2, 2),
                             sr.DistAttr(MESH, [0, -1, 1, -1]), sr.DistAttr(MESH, [0, -1, -1, -1]),
                             EXTENT)
    assert r.attr("pool") == r.attr("out") == sr.DistAttr(MESH, [0, -1, -1, -1])
    text = str(w.message)
    assert text == str(d)
    for part in ("'x'", "mesh dim 'mp'", "(tensor dim 2)", "at op 'pool'", f"why: {EXTENT}",
                 "A result at least 2 long on dim 2 (a larger input), or a split over fewer "
                 "processes, keeps it"):
        assert part in text, part
    assert f"dropped split: {d}" in explain(r, "x")
    assert "dropped split" not in explain(r, "out")


def test_the_warning_can_be_made_an_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.DroppedSplitWarning)
        with pytest.raises(sr.DroppedSplitWarning, match=r"'mp' \(tensor dim 2\)"):
            complete(collapsing())
        complete(collapsing(height=4))  # H 4 -> 2 fits mp: nothing dropped, no error


def test_summary_lists_the_dropped_splits() -> None:
    r, _ = completed(collapsing())
    lines = r.summary().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  dropped splits 1 "))
    assert lines[at + 1].split() == ["tensor", "at", "op", "mesh", "dims", "dim", "rule", "makes",
                                     "laid", "out", "why"]
    assert lines[at + 3].split()[:6] == ["x", "pool", "mp", "2", "[0,-1,1,-1]", "[0,-1,-1,-1]"]
    assert lines[at + 3].endswith(EXTENT)
    r4, _ = completed(collapsing(height=4))
    assert "dropped" not in r4.summary()


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


def concat_of_batch_split(cols: int, split: Any = "dp") -> Graph:
    """relu(concat([a, b], axis=0)), a and b [8, cols] split on rows over ``split``."""
    with Graph("cat") as g:
        a, b = g.input("a", [8, cols]), g.input("b", [8, cols])
        ops.relu(ops.concat([a, b], axis=0, name="cat"), name="out")
    shard(a, MESH, (split, None))
    shard(b, MESH, (split, None))
    return g


def test_a_split_the_rule_itself_does_not_keep_is_not_reported() -> None:
    # Paddle's concat rule replicates when every operand is split on the concat axis; given one
    # of them alone it moves the major mesh dim of the rows' co-shard (dp) to the columns and
    # drops mp itself. The cost takes that answer (3 columns: blocks of 2 and 1 fit dp): mp is
    # lost by the rule's own answer, not by completion's choice, so nothing is reported
    r, caught = completed(concat_of_batch_split(3, ("dp", "mp")))
    assert r.attr("cat") == sr.DistAttr(MESH, [-1, 0])
    assert r.dropped == () and caught == []
    # with the rows split on dp alone, the whole split moves to the columns: nothing is lost
    r, caught = completed(concat_of_batch_split(3))
    assert r.attr("cat") == sr.DistAttr(MESH, [-1, 0]) and r.dropped == () and caught == []


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
    # H 4 over a x b = 4 pieces pooled to 2: one warning, for the split of dim 2, naming both
    # mesh dims, major first, and the 4 pieces
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
    with Graph("co-shard") as g:
        x = g.input("x", [2, 3, 4, 2])
        ops.relu(ops.pool2d(x, kernel_size=[2, 1], strides=[2, 1], name="pool"), name="out")
    shard(x, mesh, (None, None, ("a", "b"), None))
    r, caught = completed(g)
    [d] = r.dropped
    assert (d.tensor, d.op, d.mesh_dims, d.dim) == ("x", "pool", ("a", "b"), 2)
    [w] = caught
    assert "over mesh dims 'a', 'b' (tensor dim 2)" in str(w.message)
    assert "shorter than the split's 4 pieces" in str(w.message)
    assert "A result at least 4 long on dim 2" in str(w.message)


def test_an_uneven_batch_keeps_its_split_beside_the_spatial_one() -> None:
    # batch 3 on h (blocks of 2 and 1), width 8 on w: both fit, so the conv keeps both and
    # nothing is dropped (before issue 24 the uneven batch took the even width split with it)
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    r, caught = completed(examples.resnet_block(mesh, layout="both", batch=3, training=False))
    assert r.attr("conv1") == sr.DistAttr(mesh, [0, -1, 1, -1])
    assert r.dropped == () and caught == []


def test_an_odd_pooled_extent_keeps_the_spatial_splits() -> None:
    # issue 24's CNN case: 14 x 14 split on H and W, pooled 3x3/2 to 7 x 7: blocks of 4 and 3
    # rows (and columns), each with the halo its windows read; nothing dropped
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    r, caught = completed(examples.resnet_block(mesh, layout="spatial", size=14))
    assert r.attr("maxpool") == sr.DistAttr(mesh, [-1, -1, 0, 1])
    assert r.dropped == () and caught == []


def test_a_mesh_dim_name_with_terminal_controls_reaches_the_warning_escaped() -> None:
    # tensor and op names are checked when the graph is built; mesh dim names are not
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp\x1b[31m"])
    _, caught = completed(collapsing(mesh))
    [w] = caught
    assert "\x1b" not in str(w.message) and "mp\\x1b[31m" in str(w.message)


def test_the_command_line_lists_them_and_prints_no_raw_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "collapse.json"
    dump(collapsing(), model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.DroppedSplitWarning)  # the CLI must not raise one
        assert main(["complete", str(model)]) == 0
        out = capsys.readouterr()
        assert "dropped splits 1 " in out.out and EXTENT in out.out
        assert "DroppedSplitWarning" not in out.err
        assert main(["explain", str(model), "x"]) == 0
        assert "dropped split: completion drops the split of 'x'" in (
            capsys.readouterr().out)
