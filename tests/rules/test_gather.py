"""gather / index_select / gather_nd / take_along_axis and their gradient rules: Paddle's layouts,
numpy's values, typed errors, and the deviations proven by execution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.execution.local import KernelInputError
from spmdrules.graph import ops
from spmdrules.graph.errors import ShapeError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
MESH3 = sr.ProcessMesh([[[0, 1], [2, 3]], [[4, 5], [6, 7]]])


def spec(shape: list[int], dm: list[int], partial: Any = None, mesh: sr.ProcessMesh = MESH
         ) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(mesh, dm, partial))


def dms(info: sr.SpmdInfo) -> list[list[int]]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_gather_replicates_the_axis_and_the_index_takes_its_place() -> None:
    g = sr.get_rule("gather")
    assert dms(g.infer_forward(spec([2, 6, 4], [-1, -1, -1]), spec([4], [0], {1: "sum"}), 0)) == [
        [-1, -1, -1], [0], [0, -1, -1]]
    assert dms(g.infer_forward(spec([8, 16, 16, 2], [0, -1, 1, -1]), spec([12], [-1]), -1)) == [
        [0, -1, 1, -1], [-1], [0, -1, 1, -1]]  # Paddle segfaults on a negative axis (list E)
    assert dms(g.infer_forward(spec([6, 8], [1, 0]), spec([], []), 0)) == [[-1, 0], [], [0]]


def test_index_select_grad_is_pending_over_the_index_s_mesh_dims() -> None:
    info = sr.get_rule("index_select_grad").infer_forward(
        spec([16, 32], [-1, 0], {1: "sum"}), spec([32], [1]), spec([16, 32], [-1, 0]), 1)
    assert dms(info) == [[-1, -1], [1], [-1, 1], [-1, -1]]
    assert info.outputs[0].partial == {1: "sum"}  # type: ignore[union-attr]


def test_gather_nd_replicates_the_indexed_dims() -> None:
    info = sr.get_rule("gather_nd").infer_forward(spec([7, 5, 6], [-1, -1, 0]), spec([2], [-1]))
    assert dms(info) == [[-1, -1, 0], [-1], [0]]
    info = sr.get_rule("gather_nd").infer_forward(spec([3, 7], [0, -1]), spec([8, 8, 1], [-1, 0, -1]))
    assert dms(info) == [[-1, -1], [-1, 0, -1], [-1, 0, -1]]


def test_take_along_axis_keeps_the_index_s_axis_sharded() -> None:
    info = sr.get_rule("take_along_axis").infer_forward(spec([6], [-1]), spec([8], [0]), 0)
    assert dms(info) == [[-1], [0], [0]]
    with pytest.raises(sr.ShardingConflictError):  # Paddle's shared '1' letter, as Paddle raises
        sr.get_rule("take_along_axis").infer_forward(spec([24, 16, 4], [0, 1, -1]),
                                                     spec([9, 16, 6], [1, -1, 0]), 2)


def test_values_are_numpy_s() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4, 3))
    i1, i2 = np.array([4, 0, 2, 2]), rng.integers(0, 4, (5, 2, 3))
    nd = np.array([[1, 2], [4, 0], [0, 3]])
    with Graph() as g:
        t = g.input("x", [5, 4, 3], "float64")
        a = ops.gather(t, g.input("i1", [4], "int64"), axis=0)
        b = ops.index_select(t, g.input("i1b", [4], "int64"), axis=-2)
        c = ops.take_along_axis(t, g.input("i2", [5, 2, 3], "int64"), axis=1)
        d = ops.gather_nd(t, g.input("nd", [3, 2], "int64"))
    got = run_serial(g, {"x": x, "i1": i1, "i1b": i1 % 4, "i2": i2, "nd": nd})
    np.testing.assert_array_equal(got[a.name], np.take(x, i1, 0))
    np.testing.assert_array_equal(got[b.name], np.take(x, i1 % 4, 1))
    np.testing.assert_array_equal(got[c.name], np.take_along_axis(x, i2, 1))
    np.testing.assert_array_equal(got[d.name], x[nd[:, 0], nd[:, 1]])


def test_bad_indices_are_refused() -> None:
    with Graph() as g:
        with pytest.raises(ShapeError, match=r"index: has dtype float32, which cannot hold"):
            ops.gather(g.input("x", [4, 2]), g.input("f", [3]))
        with pytest.raises(ShapeError, match=r"index: has rank 2; pass 1-D positions"):
            ops.gather(g.input("y", [4, 2]), g.input("i", [3, 2], "int64"))
    with Graph() as g:
        y = ops.gather(g.input("x", [4, 2], "float64"), g.input("i", [2], "int64"))
    with pytest.raises(KernelInputError, match=r"'index' holds position 4, outside 0\.\.3"):
        run_serial(g, {"x": np.zeros((4, 2)), "i": np.array([1, 4])})
    assert y.shape == (2, 2)


# ---- deviations, proven by execution --------------------------------------------------------------
DOM = ("real", "index:8")


def test_deviation_gather_index_keeps_its_shard() -> None:
    # gather/forward/23: x[3,10] dm[0,-1], index[4] dm[0], axis 1 on an 8-rank mesh
    mesh = sr.ProcessMesh(list(range(8)))
    x, i = spec([3, 10], [0, -1], mesh=mesh), spec([4], [0], mesh=mesh)
    paddle = sr.SpmdInfo([x.attr, i.attr], [sr.DistAttr(mesh, [0, -1])])
    assert execute("gather", [x, i], paddle, {"axis": 1}, ("real", "index:10")) == "wrong"
    ours = sr.get_rule("gather").infer_forward(x, i, 1)
    assert dms(ours) == [[0, -1], [-1], [0, -1]]
    assert execute("gather", [x, i], ours, {"axis": 1}, ("real", "index:10")) == "ok"


def test_deviation_gather_reverse_keeps_partial() -> None:
    x, i = spec([16], [1], {0: "sum"}), spec([6], [-1])
    out = spec([6], [1], {0: "sum"})
    ours = sr.get_rule("gather").infer_reverse(x, i, out, 0)
    assert dms(ours) == [[-1], [1], [1]] and not ours.outputs[0].partial  # type: ignore[union-attr]
    x1, i1 = spec([16], [-1]), spec([6], [1])
    paddle = sr.SpmdInfo([x1.attr, i1.attr], [sr.DistAttr(MESH, [1], {0: "sum"})])
    assert execute("gather", [x1, i1], paddle, {"axis": 0}, ("real", "index:16")) == "wrong"
    assert execute("gather", [x1, i1], ours, {"axis": 0}, ("real", "index:16")) == "ok"


def test_deviation_gather_nd_invalid_result() -> None:
    # gather_nd/forward/61: the result would shard two dims on mesh dim 0
    mesh = sr.ProcessMesh([0, 1])
    x, i = spec([2, 8, 4, 32], [-1, 0, -1, -1], mesh=mesh), spec([5, 1], [0, -1], mesh=mesh)
    with pytest.raises(sr.InvalidDistAttrError):
        sr.DistAttr(mesh, [0, 0, -1, -1])  # Paddle's answer is no attribute at all
    ours = sr.get_rule("gather_nd").infer_forward(x, i)
    assert dms(ours) == [[-1, 0, -1, -1], [-1, -1], [-1, 0, -1, -1]]
    assert execute("gather_nd", [x, i], ours, {}, ("real", "index:2")) == "ok"
    zero_d = sr.get_rule("gather_nd").infer_forward(spec([24], [0]), spec([1], [0]))
    assert zero_d.outputs[0].ndim == 0  # type: ignore[union-attr]


def test_deviation_take_along_axis_grad_misses_partial() -> None:
    x, i, g = spec([8, 6], [-1, -1]), spec([8, 4], [-1, 0]), spec([8, 4], [-1, 0])
    ours = sr.get_rule("take_along_axis_grad").infer_forward(x, i, g, 1)
    assert ours.outputs[0].partial == {0: "sum"}  # type: ignore[union-attr]
    dom = ("real", "index:6", "real")
    assert execute("take_along_axis_grad", [x, i, g], ours, {"axis": 1}, dom) == "ok"
    paddle = sr.SpmdInfo(list(ours.inputs), [sr.DistAttr(MESH, [-1, -1])])
    assert execute("take_along_axis_grad", [x, i, g], paddle, {"axis": 1}, dom) == "wrong"


def test_deviation_take_along_axis_negative_axis() -> None:
    info = sr.get_rule("take_along_axis").infer_forward(spec([4, 64], [-1, -1]),
                                                        spec([7, 64], [-1, 0]), -2)
    assert dms(info) == [[-1, 0], [-1, 0], [-1, 0]]


@pytest.mark.parametrize(("op", "count"), [("gather", 73), ("index_select", 62)])
def test_proof_index_select_masked_lookup_on_every_filed_case(op: str, count: int) -> None:
    # index-select-masked-lookup (a parallelism deviation): where Paddle gathers x's indexed
    # axis whole, ours keeps its split and the result is the pending sum of each rank's rows,
    # which computes the op (the harness checks a claimed mask too: one owner per slice)
    from proofs import filed_cases, recorded_answer

    filed = list(filed_cases(op, "index-select-masked-lookup"))
    assert len(filed) == count
    masked = 0
    for c, got in filed:
        m = c["mesh"]
        mesh = sr.ProcessMesh.from_shape(m["shape"], m["process_ids"])
        x, i = ([sr.TensorSpec(e["shape"], sr.DistAttr.replicated(mesh, len(e["shape"])))
                 for e in c["inputs"]])
        doms = ("real", f"index:{x.shape[int(c['attrs'].get('axis', 0))]}")
        ours, paddle = got.outputs[0], recorded_answer(c).outputs[0]
        assert isinstance(ours, sr.DistAttr) and ours.partial_items and not paddle.partial_items
        masked += bool(ours.mask_items)
        assert execute(op, [x, i], got, c["attrs"], doms) == "ok", c["case_id"]
    assert masked  # the mesh dims that split the axis alone give masked sums
