"""slice / strided_slice / strided_slice_grad: Paddle's behaviour, numpy's shapes, errors, kernels
on any block, and the two deviations proven by execution."""

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
from spmdrules.graph.shapes import TensorMeta, infer_meta

MESH = sr.ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[list[int]]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_sliced_axes_are_replicated_others_keep_their_shards_partials_dropped() -> None:
    x = spec([2, 7, 24], [1, -1, 0], {})
    info = sr.get_rule("slice").infer_forward(x, [1, 2], [2, 9], [7, 19], [1, 1], [])
    assert dms(info) == [[1, -1, -1], [1, -1, -1]]
    p = spec([8, 5], [-1, 0], {1: "sum"})
    info = sr.get_rule("slice").infer_forward(p, [0, 1], [1, 4], [4, 5], [1, 1], [])
    assert dms(info) == [[-1, -1], [-1, -1]] and not info.outputs[0].partial  # type: ignore[union-attr]


def test_reverse_reads_the_input_off_the_output() -> None:
    x, out = spec([8, 6, 4, 2], [1, -1, 0, -1]), spec([2, 2, 1, 1], [-1, -1, 0, -1])
    info = sr.get_rule("slice").infer_reverse(x, out, [0, 1, 2, 3], [5, 1, -1, 1], [7, 3, 4, 2],
                                              [1, 1, 1, 1], [])
    assert dms(info) == [[-1, -1, -1, -1], [-1, -1, -1, -1]]
    x, out = spec([4, 6], [-1, -1]), spec([4, 3], [0, -1])
    info = sr.get_rule("slice").infer_reverse(x, out, [1], [0], [3], [1], [])
    assert dms(info) == [[0, -1], [0, -1]]


def test_strided_grad_merges_out_grad_first() -> None:
    x, g = spec([4, 1, 6, 5], [-1, 0, -1, 1]), spec([4, 1, 6, 1], [1, -1, 0, -1])
    info = sr.get_rule("strided_slice_grad").infer_forward(x, g, [3], [0], [1], [1])
    assert dms(info) == [[1, -1, 0, -1], [1, -1, 0, -1], [1, -1, 0, -1]]


@pytest.mark.parametrize(("shape", "attrs"), [
    ((10, 16), {"axes": [0], "starts": [-4], "ends": [7]}),
    ((9, 6, 5, 7), {"axes": [0, 1, 2, 3], "starts": [3, 0, 0, 2], "ends": [6, 6, 1, 1000000]}),
    ((5, 4), {"axes": [-1], "starts": [-100], "ends": [2]}),
    ((6,), {"axes": [0], "starts": [3], "ends": [3]}),
])
def test_slice_shapes_and_values_are_numpy_s(shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    index = [slice(None)] * len(shape)
    for a, s, e in zip(attrs["axes"], attrs["starts"], attrs["ends"], strict=True):
        index[a] = slice(s, e)
    want = x[tuple(index)]
    (meta,) = infer_meta("slice", [TensorMeta(shape, "float64")], attrs)
    assert meta.shape == want.shape
    with Graph() as g:
        y = ops.slice(g.input("x", list(shape), "float64"), **attrs)
    np.testing.assert_array_equal(run_serial(g, {"x": x})[y.name], want)


def test_strided_slice_with_negative_steps_and_decrease_axis() -> None:
    x = np.arange(16 * 12 * 9, dtype=np.float64).reshape(16, 12, 9)
    with Graph() as g:
        t = g.input("x", [16, 12, 9], "float64")
        a = ops.strided_slice(t, axes=[1, 2], starts=[5, 1], ends=[3, -10], strides=[-1, -1])
        b = ops.slice(t, axes=[0, 2], starts=[3, 1], ends=[4, 5], decrease_axis=[0])
    got = run_serial(g, {"x": x})
    np.testing.assert_array_equal(got[a.name], x[:, 5:3:-1, 1::-1])
    np.testing.assert_array_equal(got[b.name], x[3, :, 1:5])


@pytest.mark.parametrize(("attrs", "match"), [
    ({"axes": [0, 0], "starts": [0, 1], "ends": [2, 3]}, "dim 0 is sliced twice"),
    ({"axes": [2], "starts": [0], "ends": [1]}, "axis 2 is out of range for 'input' of rank 2"),
    ({"axes": [0], "starts": [5], "ends": [2]}, "dim 0: start 5 and end 2 .* run against"),
    ({"axes": [0, 1], "starts": [0], "ends": [1, 2]}, "have lengths 2, 1, 2"),
    ({"axes": [0], "starts": [0], "ends": [3], "decrease_axis": [0]},
     "decrease_axis 0 must be a sliced axis of size 1"),
])
def test_bad_slices_raise_typed_errors_naming_the_dim(attrs: dict[str, Any], match: str) -> None:
    with pytest.raises(sr.SpmdError, match=match):
        sr.get_rule("slice").infer_forward(spec([6, 4], [0, -1]), **attrs)
    with Graph() as g, pytest.raises(ShapeError, match=r"op 's' \(slice\): input: "):
        g.add_op("slice", [g.input("x", [6, 4])], attrs, name="s")


def test_zero_stride_is_refused() -> None:
    with pytest.raises(sr.RuleArgumentError, match="stride 0; use a non-zero stride"):
        sr.get_rule("strided_slice").infer_forward(spec([6], [0]), [0], [0], [4], [0])


def test_kernel_computes_a_sharded_unsliced_axis_and_an_empty_block() -> None:
    x = spec([8, 6], [0, 1])
    attrs = {"axes": [1], "starts": [0], "ends": [6], "infer_flags": [1], "decrease_axis": []}
    keep = sr.SpmdInfo([x.attr], [x.attr])  # a full-range slice keeps every block where it is
    assert execute("slice", [x], keep, attrs) == "ok"
    empty = {"axes": [0], "starts": [3], "ends": [3], "infer_flags": [1], "decrease_axis": []}
    info = sr.get_rule("slice").infer_forward(x, **empty)
    assert execute("slice", [x], info, empty) == "ok"


# ---- deviations, proven by execution --------------------------------------------------------------
def test_deviation_slice_decrease_axis_paddle_s_output_does_not_fit() -> None:
    x = spec([10, 16], [0, -1])
    attrs = {"axes": [0], "starts": [-4], "ends": [7], "infer_flags": [1], "decrease_axis": [0]}
    ours = sr.get_rule("slice").infer_forward(x, **attrs)
    assert dms(ours) == [[-1, -1], [-1]]
    assert execute("slice", [x], ours, attrs) == "ok"
    paddle = sr.SpmdInfo([sr.DistAttr(MESH, [-1, -1])], [sr.DistAttr(MESH, [-1, -1])])
    assert execute("slice", [x], paddle, attrs) == "wrong"  # a rank-2 attribute on a rank-1 result
    out = spec([16], [1])
    rev = sr.get_rule("slice").infer_reverse(x, out, **attrs)  # Paddle raises here
    assert dms(rev) == [[-1, 1], [1]]


def test_deviation_strided_slice_keeping_the_last_axis_shard_is_wrong() -> None:
    x = spec([16], [0])
    attrs = {"axes": [0], "starts": [10], "ends": [-17], "strides": [-1]}
    paddle = sr.SpmdInfo([sr.DistAttr(MESH, [0])], [sr.DistAttr(MESH, [0])])
    assert execute("strided_slice", [x], paddle, attrs) == "wrong"
    ours = sr.get_rule("strided_slice").infer_forward(x, **attrs)
    assert dms(ours) == [[-1], [-1]]
    assert execute("strided_slice", [x], ours, attrs) == "ok"
