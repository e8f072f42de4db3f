"""cumsum / cummax / cummin and the gradient rules: the scanned axis replicated (the choice the
issue asks us to make: the rule replicates it, no exclusive scan in the lowering), numpy's values,
typed errors, and a cut scan refused by the kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[list[int]]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_the_scanned_axis_is_replicated_negative_axes_included() -> None:
    cs = sr.get_rule("cumsum")
    assert dms(cs.infer_forward(spec([9, 10], [0, 1]), 1, False, True, False)) == [[0, -1], [0, -1]]
    assert dms(cs.infer_forward(spec([9, 10], [0, 1]), -2, False, False, False)) == [
        [-1, 1], [-1, 1]]  # Paddle aborts on a negative axis (list E)
    assert dms(cs.infer_forward(spec([2, 6], [0, 1]), 0, True, False, False)) == [[-1, -1], [-1]]
    info = sr.get_rule("cummax").infer_forward(spec([7, 7, 7], [0, 1, -1]), -2, "int32")
    assert dms(info) == [[0, -1, -1], [0, -1, -1], [0, -1, -1]]
    g = sr.get_rule("cummin_grad").infer_forward(
        spec([16, 6, 4, 5], [1, -1, -1, 0]), spec([16, 6, 4, 5], [1, -1, -1, 0]),
        spec([16, 6, 4, 5], [1, -1, -1, 0]), 0, "int32")
    assert dms(g)[-1] == [-1, -1, -1, 0]


def test_a_scan_cut_across_ranks_is_wrong_the_replicated_one_right() -> None:
    x = spec([8, 6], [0, 1])
    attrs = {"axis": 0, "flatten": False, "exclusive": False, "reverse": False}
    cut = sr.SpmdInfo([x.attr], [x.attr])
    assert execute("cumsum", [x], cut, attrs) == "wrong"
    assert execute("cumsum", [x], sr.get_rule("cumsum").infer_forward(x, **attrs), attrs) == "ok"


@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, False), (False, True),
                                                    (True, True)])
def test_cumsum_values(exclusive: bool, reverse: bool) -> None:
    x = np.random.default_rng(1).standard_normal((3, 5))
    with Graph() as g:
        y = ops.cumsum(g.input("x", [3, 5], "float64"), axis=1, exclusive=exclusive,
                       reverse=reverse)
        f = ops.cumsum(g.input("z", [3, 5], "float64"), flatten=True)
    got = run_serial(g, {"x": x, "z": x})
    src = x[:, ::-1] if reverse else x
    want = np.cumsum(src, axis=1) - (src if exclusive else 0)
    np.testing.assert_allclose(got[y.name], want[:, ::-1] if reverse else want)
    np.testing.assert_allclose(got[f.name], np.cumsum(x))


def test_cummax_and_cummin_values_and_indices() -> None:
    x = np.array([[1.0, 3.0, 2.0, 3.0, 5.0], [4.0, 1.0, 0.0, 2.0, -1.0]])
    with Graph() as g:
        t = g.input("x", [2, 5], "float64")
        mx, mi = ops.cummax(t, axis=1), ops.cummin(t, axis=-1, dtype="int32")
    got = run_serial(g, {"x": x})
    np.testing.assert_array_equal(got[mx[0].name], np.maximum.accumulate(x, axis=1))
    np.testing.assert_array_equal(got[mx[1].name], [[0, 1, 1, 3, 4], [0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(got[mi[0].name], np.minimum.accumulate(x, axis=1))
    assert mi[1].dtype == "int32"


def test_bad_axes_are_refused() -> None:
    with pytest.raises(sr.RuleArgumentError, match="axis 2 is out of range for 'x' of rank 2"):
        sr.get_rule("cumsum").infer_forward(spec([4, 4], [0, -1]), 2, False, False, False)
    with Graph() as g, pytest.raises(sr.SpmdError, match=r"\(cummax\): dtype: 'float32' cannot"):
        ops.cummax(g.input("x", [4]), dtype="float32")
