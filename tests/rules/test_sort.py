"""topk / argsort and their gradient rules: the sorted axis replicated, numpy's order, typed
errors, and argsort_grad's check that the indices are laid out as x."""

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


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[list[int]]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_the_sorted_axis_is_replicated_values_and_indices_alike() -> None:
    info = sr.get_rule("topk").infer_forward(spec([2, 5], [1, 0]), 1, 0, True, True)
    assert dms(info) == [[-1, 0], [-1, 0], [-1, 0]]
    info = sr.get_rule("argsort").infer_forward(spec([2, 16, 12], [-1, 0, 1]), 0, False, True)
    assert dms(info) == [[-1, 0, 1]] * 3
    g = sr.get_rule("topk_grad").infer_forward(
        spec([3, 2, 16, 16], [1, -1, 0, -1]), spec([3, 2, 15, 16], [-1, -1, 1, 0]),
        spec([3, 2, 15, 16], [1, 0, -1, -1]), 15, 2, True, False)
    assert dms(g) == [[1, -1, -1, 0]] * 4


def test_argsort_grad_wants_the_indices_laid_out_as_x() -> None:
    with pytest.raises(sr.RuleArgumentError, match="'x' dim 0 is sharded on mesh dims \\[1\\]"):
        sr.get_rule("argsort_grad").infer_forward(spec([32, 8], [-1, 0]), spec([32, 8], [1, -1]),
                                                  spec([32, 8], [-1, 0]), -1, False, False)


def test_values_are_numpy_s() -> None:
    x = np.random.default_rng(3).standard_normal((3, 6))
    with Graph() as g:
        t = g.input("x", [3, 6], "float64")
        v, i = ops.topk(t, k=2, axis=1)
        s, j = ops.argsort(t, axis=0, descending=True)
    got = run_serial(g, {"x": x})
    want_i = np.argsort(-x, axis=1)[:, :2]
    np.testing.assert_array_equal(got[i.name], want_i)
    np.testing.assert_array_equal(got[v.name], np.take_along_axis(x, want_i, 1))
    np.testing.assert_array_equal(got[j.name], np.argsort(-x, axis=0, kind="stable"))
    np.testing.assert_array_equal(got[s.name], -np.sort(-x, axis=0))


def test_k_out_of_range_is_refused() -> None:
    with pytest.raises(sr.RuleArgumentError, match="k 7 is out of range for 'x' dim 1 of size 6"):
        sr.get_rule("topk").infer_forward(spec([3, 6], [0, -1]), 7, 1, True, True)
    with Graph() as g, pytest.raises(ShapeError, match=r"\(topk\): x: k 7 is out of range"):
        ops.topk(g.input("x", [3, 6]), k=7, axis=1)


def test_a_row_cut_across_ranks_is_wrong() -> None:
    x = spec([4, 8], [0, 1])
    attrs = {"k": 3, "axis": 1, "largest": True, "sorted": True}
    info = sr.get_rule("topk").infer_forward(x, **attrs)
    assert execute("topk", [x], info, attrs) == "ok"
    out = sr.DistAttr(MESH, [0, 1])
    assert execute("topk", [x], sr.SpmdInfo([x.attr], [out, out]), attrs) == "wrong"
