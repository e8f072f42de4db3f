"""nonzero and unique: replicated as Paddle answers; the graph declares their data-dependent sizes
(op attribute ``size``); the deviation nonzero-two-sharded-dims proven by execution."""

from __future__ import annotations

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


def test_nonzero_and_unique_replicate_and_declare_their_size_as_an_op_attribute() -> None:
    assert [a.name for a in sr.get_rule("nonzero").op_attrs] == ["size"]
    x = sr.TensorSpec([8, 4], sr.DistAttr(MESH, [0, -1]))
    info = sr.get_rule("nonzero").infer_forward(x)
    assert info.inputs[0] == sr.DistAttr.replicated(MESH, 2)
    u = sr.get_rule("unique").infer_forward(x, True, False, True, [], "int64")
    assert [a.ndim for a in u.outputs] == [1, 1, 0, 1]  # type: ignore[union-attr]


def test_values_with_a_declared_size() -> None:
    x = np.array([[0, 3, 0], [1, 0, 3]])
    with Graph() as g:
        t = g.input("x", [2, 3], "int64")
        nz = ops.nonzero(t, size=5)
        vals, first, inverse, counts = ops.unique(t, True, True, True, size=4)
    assert nz.shape == (5, 2) and vals.shape == (4,) and inverse.shape == (6,)
    got = run_serial(g, {"x": x})
    np.testing.assert_array_equal(got[nz.name], [[0, 1], [1, 0], [1, 2], [-1, -1], [-1, -1]])
    v, f, i, c = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(got[vals.name], [*v, 0])
    np.testing.assert_array_equal(got[first.name], [*f, -1])
    np.testing.assert_array_equal(got[inverse.name], i.reshape(-1))
    np.testing.assert_array_equal(got[counts.name], [*c, 0])


def test_a_size_is_required_and_data_that_does_not_fit_is_refused() -> None:
    with Graph() as g, pytest.raises(ShapeError, match="size: is not given, and the count of "
                                                       "nonzero elements depends on the data"):
        ops.nonzero(g.input("x", [4]))
    with Graph() as g:
        ops.nonzero(g.input("x", [4], "int64"), size=2, name="nz")
    with pytest.raises(KernelInputError, match="3 nonzero elements but the graph declared size=2"):
        run_serial(g, {"x": np.array([1, 2, 0, 3])})


def test_deviation_nonzero_two_sharded_dims() -> None:
    x = sr.TensorSpec([8, 4], sr.DistAttr(MESH, [0, 1]))  # Paddle raises on this valid input
    info = sr.get_rule("nonzero").infer_forward(x)
    assert execute("nonzero", [x], info, {"size": 32}, ("int",)) == "ok"
