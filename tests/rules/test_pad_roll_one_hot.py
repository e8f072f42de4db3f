"""pad, roll and one_hot with their gradient rules: Paddle's layouts, numpy's values, typed
errors, and the deviations proven by execution."""

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


def test_padded_and_rolled_dims_are_replicated() -> None:
    assert dms(sr.get_rule("pad").infer_forward(spec([1, 4], [-1, 1]), [0, 0, 1, 0], 0)) == [
        [-1, -1], [-1, -1]]
    assert dms(sr.get_rule("pad").infer_forward(spec([16, 2], [0, -1]), [0, 0, 0, 0], 1)) == [
        [0, -1], [0, -1]]
    assert dms(sr.get_rule("roll").infer_forward(spec([4, 24], [-1, 0]), [1, -2], [-2, 1])) == [
        [-1, -1], [-1, -1]]
    assert dms(sr.get_rule("roll").infer_forward(spec([32, 8], [1, 0]), [4], [])) == [
        [-1, -1], [-1, -1]]  # the flat roll
    assert dms(sr.get_rule("roll").infer_forward(spec([32, 8], [1, 0]), [3], [1])) == [
        [1, -1], [1, -1]]


def test_one_hot_passes_x_s_dims_and_replicates_the_classes() -> None:
    info = sr.get_rule("one_hot").infer_forward(spec([4, 2, 24], [-1, 0, 1]), 16)
    assert dms(info) == [[-1, 0, 1], [-1, 0, 1, -1]]
    rev = sr.get_rule("one_hot").infer_reverse(spec([4, 3], [-1, -1]), spec([4, 3, 64], [1, -1, 0]),
                                               64)
    assert dms(rev) == [[1, -1], [1, -1, -1]]


def test_values_are_numpy_s() -> None:
    x = np.random.default_rng(2).standard_normal((3, 4))
    ids = np.array([[0, 2], [3, 1]])
    with Graph() as g:
        t = g.input("x", [3, 4], "float64")
        p = ops.pad(t, paddings=[1, 0, 2, 3], pad_value=-1.5)
        r = ops.roll(t, shifts=[1, -3], axis=[0, -1])
        f = ops.roll(t, shifts=[5])
        o = ops.one_hot(g.input("ids", [2, 2], "int64"), num_classes=4)
    got = run_serial(g, {"x": x, "ids": ids})
    np.testing.assert_array_equal(got[p.name], np.pad(x, [(1, 0), (2, 3)], constant_values=-1.5))
    np.testing.assert_array_equal(got[r.name], np.roll(x, (1, -3), axis=(0, 1)))
    np.testing.assert_array_equal(got[f.name], np.roll(x, 5))
    np.testing.assert_array_equal(got[o.name], np.eye(4)[ids])


@pytest.mark.parametrize(("op", "attrs", "match"), [
    ("pad", {"paddings": [1, 0]}, "paddings has 2 entries for 'x' of rank 2"),
    ("pad", {"paddings": [0, 0, -1, 0]}, r"paddings\[2\] is -1 \('x' dim 1\)"),
    ("roll", {"shifts": [1, 2], "axis": [0]}, "shifts has 2 entries and axis 1"),
    ("roll", {"shifts": [1], "axis": [2]}, "axis 2 is out of range"),
])
def test_bad_borders_and_shifts_are_refused(op: str, attrs: dict[str, Any], match: str) -> None:
    with pytest.raises(sr.SpmdError, match=match):
        sr.get_rule(op).infer_forward(spec([4, 6], [0, -1]), **attrs)
    with Graph() as g, pytest.raises(ShapeError, match=rf"op 'o' \({op}\)"):
        g.add_op(op, [g.input("x", [4, 6])], attrs, name="o")


def test_one_hot_wants_integer_ids_in_range() -> None:
    with Graph() as g, pytest.raises(ShapeError, match="x: has dtype float32; pass integer"):
        ops.one_hot(g.input("x", [3]), num_classes=2)
    with Graph() as g:
        ops.one_hot(g.input("x", [3], "int64"), num_classes=2, name="o")
    with pytest.raises(sr.SpmdError, match=r"'x' holds position 5, outside 0\.\.1"):
        run_serial(g, {"x": np.array([0, 5, 1])})


# ---- deviations, proven by execution --------------------------------------------------------------
def test_deviation_one_hot_keeps_input_partial() -> None:
    x = spec([6], [-1], {0: "sum"})
    # Paddle keeps x a pending sum and the result complete: each rank would one-hot its piece,
    # and the one-hot rows of pieces do not add up to the one-hot row of their sum
    pieces = np.array([1, 2])  # x = 3, split over mesh dim 0 (2 ranks)
    eye = np.eye(9)
    assert not np.array_equal(eye[pieces].sum(axis=0), eye[pieces.sum()])
    paddle = sr.SpmdInfo([x.attr], [sr.DistAttr(MESH, [-1, -1])])
    assert execute("one_hot", [x], paddle, {"num_classes": 9}, ("index:9",)) != "ok"
    ours = sr.get_rule("one_hot").infer_forward(x, 9)
    assert not ours.inputs[0].partial  # type: ignore[union-attr]
    assert execute("one_hot", [x], ours, {"num_classes": 9}, ("index:9",)) == "ok"


def test_pad_grad_answers_both_arguments_paddle_one_of_the_same_layout() -> None:
    # a format equivalence (formats.OMITTED), not a deviation: Paddle's answer leaves x out, and
    # with x laid out as ours it executes as ours does (the comparator reads them as one)
    x, g = spec([2, 2, 7, 32], [-1, 1, 0, -1]), spec([2, 3, 7, 35], [-1, 0, 1, -1])
    attrs = {"paddings": [0, 0, 0, 1, 0, 0, 0, 3], "pad_value": 1.0}
    ours = sr.get_rule("pad_grad").infer_forward(x, g, **attrs)
    assert dms(ours) == [[-1, -1, 1, -1], [-1, -1, 1, -1], [-1, -1, 1, -1]]
    assert execute("pad_grad", [x, g], ours, attrs) == "ok"
    paddle = sr.SpmdInfo([ours.inputs[1]], list(ours.outputs))  # one attribute for two arguments
    assert execute("pad_grad", [x, g], paddle, attrs) == "wrong"  # as written: malformed
    written_as_ours = sr.SpmdInfo([ours.inputs[0], *paddle.inputs], list(paddle.outputs))
    assert execute("pad_grad", [x, g], written_as_ours, attrs) == "ok"
