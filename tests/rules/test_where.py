"""where: Paddle's behaviour, numpy's broadcasting, typed errors, and the deviations proven by
execution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.errors import ShapeError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
WHERE = sr.get_rule("where")
DOMAINS = ("bool", "real", "real")


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[list[int]]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_condition_and_x_merge_and_the_result_follows() -> None:
    info = WHERE.infer_forward(spec([32], [0]), spec([32], [0]), spec([32], [0]))
    assert dms(info) == [[0], [0], [0], [0]]
    info = WHERE.infer_forward(spec([8, 16], [0, -1]), spec([8, 16], [-1, 1]), spec([8, 16], [1, 0]))
    assert dms(info) == [[0, 1], [0, 1], [0, 1], [0, 1]]  # y's own shards are not asked for
    p = WHERE.infer_forward(spec([4], [-1]), spec([4], [0], {1: "sum"}), spec([4], [-1]))
    assert not p.inputs[1].partial and not p.outputs[0].partial  # type: ignore[union-attr]


def test_conflicting_shards_of_one_dim_raise() -> None:
    with pytest.raises(sr.ShardingConflictError, match="sharded by mesh dims"):
        WHERE.infer_forward(spec([8, 4], [0, -1]), spec([8, 4], [1, -1]), spec([8, 4], [-1, -1]))


def test_reverse_reads_every_operand_off_the_result() -> None:
    info = WHERE.infer_reverse(spec([1, 6], [-1, -1]), spec([4, 6], [-1, -1]), spec([6], [-1]),
                               spec([4, 6], [0, 1]))
    assert dms(info) == [[-1, 1], [0, 1], [1], [0, 1]]


def test_numpy_broadcasting_of_any_ranks() -> None:
    rng = np.random.default_rng(0)
    c, x, y = rng.random((3, 1, 5)) > 0.5, rng.standard_normal((4, 1)), rng.standard_normal(5)
    with Graph() as g:
        out = ops.where(g.input("c", [3, 1, 5], "bool"), g.input("x", [4, 1], "float64"),
                        g.input("y", [5], "float64"))
    assert out.shape == (3, 4, 5)
    np.testing.assert_array_equal(run_serial(g, {"c": c, "x": x, "y": y})[out.name],
                                  np.where(c, x, y))


def test_operands_that_do_not_broadcast_and_a_non_bool_condition_are_refused() -> None:
    with pytest.raises(sr.RuleArgumentError, match="'y' dim 0 has size 3 but 'x' has size 4"):
        WHERE.infer_forward(spec([4], [-1]), spec([4], [-1]), spec([3], [-1]))
    with Graph() as g:
        with pytest.raises(ShapeError, match=r"op 'w' \(where\): y: dim 0 has size 3"):
            g.add_op("where", [g.input("c", [4], "bool"), g.input("x", [4]), g.input("y", [3])],
                     name="w")
        with pytest.raises(ShapeError, match="condition: has dtype float32; pass a bool"):
            g.add_op("where", [g.input("f", [4]), g.input("a", [4]), g.input("b", [4])], name="v")


# ---- deviations, proven by execution --------------------------------------------------------------
def test_deviation_where_shards_broadcast_dim() -> None:
    # where/forward/25: Paddle answers [0,1] for the [1, 8] operands, whose dim 0 broadcasts
    c, x, y = spec([12, 8], [0, 1]), spec([1, 8], [0, 1]), spec([1, 8], [1, 0])
    a = sr.DistAttr(MESH, [0, 1])
    assert execute("where", [c, x, y], sr.SpmdInfo([a, a, a], [a]), {}, DOMAINS) == "wrong"
    ours = WHERE.infer_forward(c, x, y)
    assert dms(ours) == [[0, 1], [-1, 1], [-1, 1], [0, 1]]
    assert execute("where", [c, x, y], ours, {}, DOMAINS) == "ok"


def test_deviation_where_broadcast_ranks() -> None:
    # where/forward/48: Paddle fails in a string index when the ranks differ
    c, x, y = spec([4, 6, 1, 8], [-1, -1, -1, 0]), spec([4, 6, 2, 8], [-1, 0, -1, -1]), \
        spec([2, 8], [-1, -1])
    ours = WHERE.infer_forward(c, x, y)
    assert dms(ours) == [[-1, -1, -1, 0], [-1, -1, -1, 0], [-1, 0], [-1, -1, -1, 0]]
    assert execute("where", [c, x, y], ours, {}, DOMAINS) == "ok"
