"""mean (no Paddle rule): a sharded reduced dim leaves a pending *sum* (each rank divides its local
sum by the global count), exact for uneven blocks, where an avg of block means is not."""

from __future__ import annotations

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2], [3, 4, 5]])


def test_a_sharded_reduced_dim_leaves_a_pending_sum_exact_on_uneven_blocks() -> None:
    x = sr.TensorSpec([4, 7], sr.DistAttr(MESH, [0, 1]))  # 7 rows over 3 ranks: 3, 2, 2
    attrs = {"axis": [1], "keepdim": False}
    info = sr.get_rule("mean").infer_forward(x, **attrs)
    assert info.outputs[0] == sr.DistAttr(MESH, [0], {1: "sum"})
    assert execute("mean", [x], info, attrs) == "ok"
    avg = sr.SpmdInfo([x.attr], [sr.DistAttr(MESH, [0], {1: "avg"})])
    assert execute("mean", [x], avg, attrs) == "wrong"  # a mean of uneven block means is off


@pytest.mark.parametrize(("axis", "keepdim"), [([], False), ([0, -1], True), ([1], False)])
def test_values_are_numpy_s(axis: list[int], keepdim: bool) -> None:
    x = np.random.default_rng(4).standard_normal((3, 4, 5))
    with Graph() as g:
        y = ops.mean(g.input("x", [3, 4, 5], "float64"), axis=axis, keepdim=keepdim)
    want = np.mean(x, axis=tuple(axis) or None, keepdims=keepdim)
    assert y.shape == want.shape
    np.testing.assert_allclose(run_serial(g, {"x": x})[y.name], want)


def test_reverse_reads_x_off_the_result() -> None:
    x, out = (sr.TensorSpec([4, 6], sr.DistAttr(MESH, [-1, -1])),
              sr.TensorSpec([4], sr.DistAttr(MESH, [1])))
    info = sr.get_rule("mean").infer_reverse(x, out, [1], False)
    assert info.inputs[0] == sr.DistAttr(MESH, [1, -1])
