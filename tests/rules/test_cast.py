"""cast (no Paddle rule): shards kept, pending sums resolved first, dtypes as asked."""

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


def test_every_dim_keeps_its_shard_and_a_pending_sum_is_resolved_first() -> None:
    x = sr.TensorSpec([4, 6], sr.DistAttr(MESH, [0, -1], {1: "sum"}))
    info = sr.get_rule("cast").infer_forward(x, "int32")
    assert info.inputs[0] == info.outputs[0] == sr.DistAttr(MESH, [0, -1])
    # a sum of truncations is not the truncated sum: keeping the pending sum would be wrong
    kept = sr.SpmdInfo([x.attr], [x.attr])
    assert execute("cast", [x], kept, {"dtype": "int64"}, seed=3) == "wrong"
    assert execute("cast", [x], info, {"dtype": "int64"}) == "ok"


def test_dtypes_as_asked_and_values_as_numpy_s() -> None:
    x = np.array([[1.7, -2.2], [0.0, 3.5]])
    with Graph() as g:
        t = g.input("x", [2, 2], "float64")
        i, b = ops.cast(t, "int32"), ops.cast(t, dtype="bool")
    assert (i.dtype, b.dtype) == ("int32", "bool")
    got = run_serial(g, {"x": x})
    np.testing.assert_array_equal(got[i.name], x.astype(np.int32))
    np.testing.assert_array_equal(got[b.name], x.astype(bool))
    with Graph() as g, pytest.raises(ShapeError, match="dtype: 'float8' is not a dtype"):
        ops.cast(g.input("x", [2]), "float8")
