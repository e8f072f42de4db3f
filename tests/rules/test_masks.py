"""Masked pending sums (spmdrules.engine.masks): the attribute, which rules keep a mask and which
drop it, each answer proven by execution (the harness scatters a masked sum with one owner per
slice and checks every result that claims a mask holds each slice on one process), and the
reshards of a masked sum."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from proofs import execute
from spmdrules.rules.elementwise import UNARY_OPS, ZERO_PRESERVING

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.completion.reshard_plans import ReshardError, plan_reshard
from spmdrules.core.shards import ShardMismatch, gather, scatter
from spmdrules.execution.executor import run_serial
from spmdrules.graph.graph import Graph

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: Sequence[int], dm: Sequence[int], partial: Any = None,
         masks: Any = None) -> TensorSpec:
    return TensorSpec(list(shape), DistAttr(MESH, list(dm), partial, masks=masks))


def masked(shape: Sequence[int], dm: Sequence[int], by: int) -> TensorSpec:
    """A sum pending on mp (mesh dim 1) masked by tensor dim ``by``."""
    return spec(shape, dm, {1: "sum"}, {1: by})


def maps(info: SpmdInfo) -> list[str]:
    flat: list[Any] = []
    for a in (*info.inputs, *info.outputs):
        flat.extend(a if isinstance(a, tuple) else (a,))
    return [a.mapping_str() for a in flat if isinstance(a, DistAttr)]


# ---- the attribute ------------------------------------------------------------------------------
def test_a_mask_is_part_of_the_value_and_survives_pickling() -> None:
    a = DistAttr(MESH, [0, -1], {1: "sum"}, masks={"mp": 0})
    plain = DistAttr(MESH, [0, -1], {1: "sum"})
    assert a.masks == {1: 0} and a.mask_items == ((1, 0),)
    assert a != plain and hash(a) != hash(plain) and a.without_masks() == plain
    assert pickle.loads(pickle.dumps(a)) == a
    assert a.mapping_str() == "[0,-1] P{1:sum masked by dim 0}"
    assert "masks={1: 0}" in repr(a)
    # a copy with a new layout may move dims: it has no mask; so has a resolved sum
    assert a.replace(dims_mapping=[-1, 0], partial={1: "sum"}).masks == {}
    assert a.without_partial().masks == {}


@pytest.mark.parametrize(("partial", "masks", "says"), [
    (None, {1: 0}, "not a pending sum"),
    ({1: "max"}, {1: 0}, "not a pending sum"),
    ({1: "sum"}, {1: 2}, "give a dim in 0..1"),
    ({1: "sum"}, {"tp": 0}, "not a dim name"),
])
def test_a_mask_without_its_sum_or_dim_is_refused_by_name(partial: Any, masks: Any,
                                                          says: str) -> None:
    with pytest.raises(sr.InvalidDistAttrError, match=says):
        DistAttr(MESH, [0, -1], partial, masks=masks)


def test_scatter_gives_each_slice_one_owner_and_gather_checks_the_claim() -> None:
    x = np.arange(1.0, 25.0).reshape(6, 4)
    a = DistAttr(MESH, [-1, -1], {1: "sum"}, masks={1: 0})
    blocks = scatter(x, a)
    np.testing.assert_array_equal(gather(blocks, x.shape, a), x)
    for c in [(0, 0), (1, 1)]:  # along mp, each row is on one process
        assert ((blocks[(c[0], 0)] != 0).any(axis=1) ^ (blocks[(c[0], 1)] != 0).any(axis=1)).all()
    # a plain sum's pieces are nonzero everywhere: claimed masked, gathering refuses it
    plain = scatter(x, a.without_masks(), np.random.default_rng(0))
    with pytest.raises(ShardMismatch, match="masked by tensor dim 0"):
        gather(plain, x.shape, a)


# ---- which rules keep a mask --------------------------------------------------------------------
def test_every_zero_preserving_kernel_maps_zeros_to_zeros_and_the_others_do_not_claim_it() -> None:
    for op in sorted(ZERO_PRESERVING):
        g = Graph()
        x = g.input("x", [3, 4])
        g.add_op(op, [x], results=["out"])
        got = run_serial(g, {"x": np.zeros((3, 4))})["out"]
        assert not np.asarray(got).any(), op
        assert get_rule(op).masks, op
    for op in sorted(set(UNARY_OPS) - ZERO_PRESERVING):
        assert not get_rule(op).masks, op


@pytest.mark.parametrize("op", ["silu", "relu", "gelu", "tanh"])
def test_a_zero_preserving_op_keeps_the_mask_and_executes(op: str) -> None:
    x = masked([6, 4], [0, -1], 0)
    info = get_rule(op).infer_forward(x) if op != "gelu" else get_rule(op).infer_forward(x, False)
    assert maps(info) == ["[0,-1] P{1:sum masked by dim 0}"] * 2
    attrs = {"approximate": False} if op == "gelu" else {}
    assert execute(op, [x], info, attrs) == "ok"


def test_an_op_that_is_not_zero_preserving_reduces_the_masked_sum_first() -> None:
    x = masked([6, 4], [0, -1], 0)
    info = get_rule("sigmoid").infer_forward(x)
    assert maps(info) == ["[0,-1]", "[0,-1]"]
    assert execute("sigmoid", [x], info, {}) == "ok"


def test_a_rule_that_knows_no_masks_sees_the_plain_sum() -> None:
    x = masked([6, 4], [0, -1], 0)
    for op, args in [("cumsum", (0, False, False, False)), ("softmax", (1,)),
                     ("sum", ([1], False))]:
        info = get_rule(op).infer_forward(x, *args)
        assert not any(a.mask_items for a in (*info.inputs, *info.outputs)
                       if isinstance(a, DistAttr)), op
    # reverse inference never asks for a mask: only the op computing a sum makes one
    info = get_rule("silu").infer_reverse(x, x)
    assert not any(isinstance(a, DistAttr) and a.mask_items for a in info.inputs)


def test_a_product_keeps_the_mask_with_a_whole_factor_or_the_same_letter_only() -> None:
    mul = get_rule("multiply")
    x, w = masked([6, 4], [0, -1], 0), spec([6, 1], [0, -1])
    info = mul.infer_forward(x, w)  # a token's rows times its routing weight
    assert maps(info)[-1] == "[0,-1] P{1:sum masked by dim 0}"
    assert execute("multiply", [x, w], info, {}) == "ok"
    both = mul.infer_forward(x, x)  # the gate times the up projection: one lookup's rows
    assert maps(both) == ["[0,-1] P{1:sum masked by dim 0}"] * 3
    assert execute("multiply", [x, x], both, {}) == "ok"
    # masked by different letters: a slice may hold two owners' factors; one sum is reduced
    y = masked([6, 6], [-1, -1], 1)
    cross = mul.infer_forward(masked([6, 6], [-1, -1], 0), y)
    assert "masked" not in maps(cross)[-1]
    assert execute("multiply", [masked([6, 6], [-1, -1], 0), y], cross, {}) == "ok"
    # times a plain sum on the same mesh dim: no mask, one of the two sums reduced first
    p = spec([6, 4], [0, -1], {1: "sum"})
    mixed = mul.infer_forward(x, p)
    assert "masked" not in maps(mixed)[-1]
    assert execute("multiply", [x, p], mixed, {}) == "ok"


def test_a_batched_product_keeps_a_mask_on_a_kept_letter_and_sums_a_contracted_one() -> None:
    a, b = masked([8, 6, 4], [0, -1, -1], 0), spec([8, 4, 1], [0, -1, -1])
    info = get_rule("bmm").infer_forward(a, b)  # an expert's weights times its token
    assert maps(info)[-1] == "[0,-1,-1] P{1:sum masked by dim 0}"
    assert execute("bmm", [a, b], info, {}) == "ok"
    pair = get_rule("bmm").infer_forward(a, masked([8, 4, 1], [0, -1, -1], 0))
    assert maps(pair)[-1] == "[0,-1,-1] P{1:sum masked by dim 0}"
    assert execute("bmm", [a, masked([8, 4, 1], [0, -1, -1], 0)], pair, {}) == "ok"
    # masked by the contracted k: each result element sums several owners' products
    k = masked([6, 4], [-1, -1], 1)
    mm = get_rule("matmul").infer_forward(k, spec([4, 3], [-1, -1]), False, False)
    assert "masked" not in maps(mm)[-1]
    assert execute("matmul", [k, spec([4, 3], [-1, -1])], mm,
                   {"trans_x": False, "trans_y": False}) == "ok"
    # matmul with x transposed: its stored dim 1 is the rows m, which the product keeps
    t = masked([4, 6], [-1, -1], 1)
    tm = get_rule("matmul").infer_forward(t, spec([4, 3], [-1, -1]), True, False)
    assert maps(tm)[-1] == "[-1,-1] P{1:sum masked by dim 0}"
    assert execute("matmul", [t, spec([4, 3], [-1, -1])], tm,
                   {"trans_x": True, "trans_y": False}) == "ok"


@pytest.mark.parametrize(("op", "x", "attrs", "out"), [
    ("squeeze", masked([6, 4, 1], [0, -1, -1], 0), {"axis": [2]}, "masked by dim 0"),
    ("unsqueeze", masked([6, 4], [0, -1], 0), {"axis": [0]}, "masked by dim 1"),
    ("reshape", masked([6, 4], [0, -1], 0), {"shape": [6, 2, 2]}, "masked by dim 0"),
    ("reshape", masked([6, 4], [0, -1], 0), {"shape": [3, 2, 4]}, None),  # the owner dim cut
    ("split", masked([6, 4], [0, -1], 0), {"sections": [1, 3], "axis": 1}, "masked by dim 0"),
    ("unbind", masked([6, 4], [-1, -1], 1), {"axis": 1}, None),  # each piece one owner's
])
def test_a_shape_op_moves_the_mask_with_its_dim(op: str, x: TensorSpec, attrs: dict[str, Any],
                                                 out: str | None) -> None:
    info = get_rule(op).infer_forward(x, *attrs.values())
    last = maps(info)[-1]
    assert (out in last) if out else "masked" not in last, last
    assert execute(op, [x], info, attrs) == "ok"


def test_a_lookup_from_a_row_split_table_makes_the_masked_sum() -> None:
    w, ids = spec([4, 8, 3], [1, -1, -1]), spec([10], [0])
    info = get_rule("index_select").infer_forward(w, ids, 0)
    assert maps(info) == ["[1,-1,-1]", "[0]", "[0,-1,-1] P{1:sum masked by dim 0}"]
    assert execute("index_select", [w, ids], info, {"axis": 0}, ("real", "index:4")) == "ok"
    # co-sharded over both mesh dims: a plain sum (a row is on one process of the group)
    co = spec([4, 8, 3], [-1, -1, -1])
    co = TensorSpec([4, 8, 3], DistAttr(MESH, multi_dims_mapping=[[0, 1], [], []]))
    info = get_rule("index_select").infer_forward(co, spec([10], [-1]), 0)
    assert maps(info)[-1] == "[-1,-1,-1] P{0:sum,1:sum}"
    assert execute("index_select", [co, spec([10], [-1])], info, {"axis": 0},
                   ("real", "index:4")) == "ok"


# ---- reshards ---------------------------------------------------------------------------------
def test_dropping_a_mask_moves_nothing_and_no_reshard_makes_one() -> None:
    m = DistAttr(MESH, [0, -1], {1: "sum"}, masks={1: 0})
    assert plan_reshard(m, m.without_masks(), (8, 4)).steps == ()
    assert [s.kind for s in plan_reshard(m, DistAttr(MESH, [0, -1]), (8, 4)).steps] == [
        "all_reduce"]
    with pytest.raises(ReshardError, match="only the op that computes a masked sum"):
        plan_reshard(m.without_masks(), m, (8, 4))
