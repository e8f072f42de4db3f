"""scatter / scatter_nd_add / put_along_axis / index_put and the gradient rules: Paddle's layouts,
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


def spec(shape: list[int], dm: list[int], partial: Any = None, mesh: sr.ProcessMesh = MESH
         ) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(mesh, dm, partial))


def dms(info: sr.SpmdInfo) -> list[Any]:
    return [[list(e.dims_mapping) for e in a] if isinstance(a, tuple) else list(a.dims_mapping)
            for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_scatter_keeps_rows_whole_and_the_other_dims_follow_the_updates() -> None:
    info = sr.get_rule("scatter").infer_forward(spec([8, 6], [0, -1]), spec([4], [-1]),
                                                spec([4, 6], [-1, 1]), True)
    assert dms(info) == [[-1, 1], [-1], [-1, 1], [-1, 1]]
    assert not info.outputs[0].partial  # type: ignore[union-attr]


def test_put_along_axis_keeps_the_axis_whole() -> None:
    info = sr.get_rule("put_along_axis").infer_forward(
        spec([4, 6], [0, 1]), spec([4, 3], [0, -1]), spec([4, 3], [0, -1]), 1, "add", True)
    assert dms(info) == [[0, -1], [0, -1], [0, -1], [0, -1]]


def test_index_put_grad_keeps_the_value_s_broadcast_dims_whole() -> None:
    info = sr.get_rule("index_put_grad").infer_forward(
        spec([6, 4], [-1, 0]), (spec([2], [-1]),), spec([1], [-1]), spec([6, 4], [-1, 0]), False)
    assert dms(info)[-2:] == [[-1, -1], [-1]]


def test_values_are_numpy_s() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4))
    idx, upd = np.array([4, 0, 4]), rng.standard_normal((3, 4))
    along = rng.integers(0, 4, (5, 2))
    val = rng.standard_normal((5, 2))
    with Graph() as g:
        t = g.input("x", [5, 4], "float64")
        a = ops.scatter(t, g.input("i", [3], "int64"), g.input("u", [3, 4], "float64"),
                        overwrite=False)
        b = ops.scatter_nd_add(t, g.input("nd", [3, 1], "int64"), g.input("u2", [3, 4], "float64"))
        c = ops.put_along_axis(t, g.input("ia", [5, 2], "int64"), g.input("v", [5, 2], "float64"),
                               axis=1, reduce="add")
        d = ops.index_put(t, [g.input("ip", [3], "int64")], g.input("w", [4], "float64"))
    got = run_serial(g, {"x": x, "i": idx, "u": upd, "nd": idx[:, None], "u2": upd, "ia": along,
                         "v": val, "ip": idx, "w": upd[0]})
    want = x.copy()
    want[[4, 0]] = 0
    np.add.at(want, idx, upd)
    np.testing.assert_allclose(got[a.name], want)
    want = x.copy()
    np.add.at(want, idx, upd)
    np.testing.assert_allclose(got[b.name], want)
    want = x.copy()
    np.add.at(want, (np.arange(5)[:, None], along), val)
    np.testing.assert_allclose(got[c.name], want)
    want = x.copy()
    want[idx] = upd[0]
    np.testing.assert_allclose(got[d.name], want)


def test_bad_input_is_refused() -> None:
    with Graph() as g:
        x = g.input("x", [4, 2], "float64")
        with pytest.raises(ShapeError, match=r"\(scatter\): index: has dtype float32"):
            ops.scatter(x, g.input("f", [3]), g.input("u", [3, 2]))
        with pytest.raises(ShapeError, match=r"\(scatter\): updates: has shape \[3, 3\]; give it "
                                             r"shape \[3, 2\]"):
            ops.scatter(x, g.input("i", [3], "int64"), g.input("u3", [3, 3]))
        with pytest.raises(ShapeError, match=r"\(put_along_axis\): index: has rank 1 but x has 2"):
            ops.put_along_axis(x, g.input("i1", [3], "int64"), g.input("v1", [3]), axis=0)
        with pytest.raises(ShapeError, match=r"reduce: is 'max'; use one of assign"):
            ops.put_along_axis(x, g.input("i2", [3, 2], "int64"), g.input("v2", [3, 2]),
                               axis=0, reduce="max")
        with pytest.raises(ShapeError, match=r"value has size 3 .* make the sizes equal"):
            ops.index_put(x, [g.input("i3", [5], "int64")], g.input("v3", [3]))
        with pytest.raises(ShapeError, match=r"value: has shape \[2, 5, 2\]; give a shape that "
                                             r"broadcasts to the indexed rows \[5, 2\]"):
            ops.index_put(x, [g.input("i4", [5], "int64")], g.input("v4", [2, 5, 2]))
    with Graph() as g:
        y = ops.scatter(g.input("x", [4, 2], "float64"), g.input("i", [2], "int64"),
                        g.input("u", [2, 2], "float64"))
    with pytest.raises(KernelInputError, match=r"'index' holds position 4, outside 0\.\.3"):
        run_serial(g, {"x": np.zeros((4, 2)), "i": np.array([1, 4]), "u": np.ones((2, 2))})
    assert y.shape == (4, 2)


# ---- deviations, proven by execution --------------------------------------------------------------
def test_deviation_scatter_sharded_positions() -> None:
    # scatter/forward/1: x[12] dm[0], index[4] dm[0], updates[4] dm[0] on two ranks
    mesh = sr.ProcessMesh([0, 1])
    x, i, u = (spec([12], [0], mesh=mesh), spec([4], [0], mesh=mesh), spec([4], [0], mesh=mesh))
    dom = ("real", "index:12", "real")
    paddle = sr.SpmdInfo([sr.DistAttr(mesh, [-1]), i.attr, u.attr],
                         [sr.DistAttr(mesh, [-1], {0: "sum"})])
    assert execute("scatter", [x, i, u], paddle, {"overwrite": False}, dom) == "wrong"
    ours = sr.get_rule("scatter").infer_forward(x, i, u, False)
    assert dms(ours) == [[-1], [-1], [-1], [-1]]
    assert execute("scatter", [x, i, u], ours, {"overwrite": False}, dom) == "ok"


def test_deviation_scatter_nd_add_misaligned() -> None:
    x, i, u = spec([4, 6], [-1, -1]), spec([5, 1], [0, -1]), spec([5, 6], [0, -1])
    dom = ("real", "index:4", "real")
    # Paddle pairs updates' dim 0 with x's dim 0, an indexed dim
    paddle = sr.SpmdInfo([sr.DistAttr(MESH, [0, -1]), i.attr, u.attr], [sr.DistAttr(MESH, [0, -1])])
    assert execute("scatter_nd_add", [x, i, u], paddle, {}, dom) == "wrong"
    ours = sr.get_rule("scatter_nd_add").infer_forward(x, i, u)
    assert execute("scatter_nd_add", [x, i, u], ours, {}, dom) == "ok"


def test_deviation_put_along_axis_negative_axis() -> None:
    # put_along_axis/forward/18: Paddle fails with std::out_of_range
    mesh = sr.ProcessMesh(list(range(8)))
    x = spec([6, 3, 8, 12], [-1, -1, 0, -1], mesh=mesh)
    i = spec([6, 16, 8, 10], [0, -1, -1, -1], mesh=mesh)
    v = spec([6, 16, 8, 10], [-1, 0, -1, -1], mesh=mesh)
    attrs = {"axis": -3, "reduce": "add", "include_self": False}
    ours = sr.get_rule("put_along_axis").infer_forward(x, i, v, *attrs.values())
    assert dms(ours) == [[-1, -1, 0, -1]] * 4
    assert execute("put_along_axis", [x, i, v], ours, attrs, ("real", "index:3", "real")) == "ok"


def test_deviation_index_put_keeps_input_partial() -> None:
    # index_put/forward/5 (shrunk): Paddle returns the second index still a pending sum
    x = spec([8, 6, 8], [-1, 0, 1])
    idx = (spec([2], [0]), spec([2], [1], {0: "sum"}))
    v = spec([2, 8], [-1, -1])
    dom = ("real", ("index:8", "index:6"), "real")
    paddle = sr.SpmdInfo([sr.DistAttr(MESH, [-1, -1, 1]),
                          (sr.DistAttr(MESH, [-1]), sr.DistAttr(MESH, [-1], {0: "sum"})),
                          sr.DistAttr(MESH, [-1, 1])], [sr.DistAttr(MESH, [-1, -1, 1])])
    assert execute("index_put", [x, idx, v], paddle, {"accumulate": False}, dom) == "wrong"
    ours = sr.get_rule("index_put").infer_forward(x, idx, v, False)
    assert dms(ours)[1] == [[-1], [-1]] and not ours.inputs[1][1].partial  # type: ignore[index]
    assert execute("index_put", [x, idx, v], ours, {"accumulate": False}, dom) == "ok"


def test_deviation_index_put_grad_misses_broadcast_sum() -> None:
    # index_put/reverse/46: x[6,4] dm[-1,0], value[1]: Paddle answers x_grad [-1,0], value_grad [-1]
    mesh = sr.ProcessMesh([0, 1])
    x, idx = spec([6, 4], [-1, 0], mesh=mesh), (spec([2], [-1], mesh=mesh),)
    v, g = spec([1], [-1], mesh=mesh), spec([6, 4], [-1, 0], mesh=mesh)
    dom = ("real", ("index:6",), "real", "real")
    paddle = sr.SpmdInfo([x.attr, (idx[0].attr,), v.attr, g.attr], [x.attr, v.attr])
    assert execute("index_put_grad", [x, idx, v, g], paddle, {"accumulate": False}, dom) == "wrong"
    ours = sr.get_rule("index_put_grad").infer_forward(x, idx, v, g, False)
    assert dms(ours)[-2:] == [[-1, -1], [-1]]
    assert execute("index_put_grad", [x, idx, v, g], ours, {"accumulate": False}, dom) == "ok"
