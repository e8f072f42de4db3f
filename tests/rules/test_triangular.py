"""triu / tril_triu: the matrix dims replicated as Paddle does; numpy's triu and tril; kernels
that mask any block by its global rows and columns."""

from __future__ import annotations

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.errors import ShapeError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int]) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm))


def test_the_matrix_dims_are_replicated_the_batch_dims_keep_their_shards() -> None:
    info = sr.get_rule("triu").infer_forward(spec([8, 5, 16, 3], [-1, 1, -1, 0]), -1)
    assert [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)] == [  # type: ignore[union-attr]
        [-1, 1, -1, -1], [-1, 1, -1, -1]]
    rev = sr.get_rule("tril_triu").infer_reverse(spec([4, 6, 6], [-1, -1, -1]),
                                                 spec([4, 6, 6], [0, 1, -1]), 0, True)
    assert list(rev.inputs[0].dims_mapping) == [0, -1, -1]  # type: ignore[union-attr]


@pytest.mark.parametrize("k", [-3, -1, 0, 2, 7])
def test_values_are_numpy_s_triu_and_tril(k: int) -> None:
    x = np.random.default_rng(k + 5).standard_normal((2, 5, 6))
    with Graph() as g:
        t = g.input("x", [2, 5, 6], "float64")
        up, lo = ops.triu(t, diagonal=k), ops.tril_triu(t, diagonal=k, lower=True)
        up2 = ops.tril_triu(t, diagonal=k, lower=False)
    got = run_serial(g, {"x": x})
    np.testing.assert_array_equal(got[up.name], np.triu(x, k))
    np.testing.assert_array_equal(got[up2.name], np.triu(x, k))
    np.testing.assert_array_equal(got[lo.name], np.tril(x, k))


def test_the_kernel_masks_sharded_matrix_blocks_by_their_global_positions() -> None:
    x = spec([6, 6], [0, 1])
    keep = sr.SpmdInfo([x.attr], [x.attr])
    assert execute("triu", [x], keep, {"diagonal": 1}) == "ok"


def test_a_vector_has_no_triangle() -> None:
    with pytest.raises(sr.RuleArgumentError, match="'x' has rank 1; a triangle needs"):
        sr.get_rule("triu").infer_forward(spec([6], [0]), 0)
    with Graph() as g, pytest.raises(ShapeError, match=r"op 't' \(triu\): x: has rank 1"):
        g.add_op("triu", [g.input("x", [6])], name="t")
