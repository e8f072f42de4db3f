"""lrn: the rule keeps batch and spatial shards and replicates the channels; the kernel equals a
direct loop over ONNX's LRN definition (onnx.reference's LRN
loops over the batch instead of the channels in onnx 1.23, so it is not used as the reference)."""

from __future__ import annotations

import numpy as np
import pytest

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])


def _direct(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX LRN, channel by channel: alpha is divided by size there."""
    out = np.empty_like(x)
    c = x.shape[1]
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + size - 1 - (size - 1) // 2)
        sq = (x[:, lo : hi + 1] ** 2).sum(axis=1)
        out[:, i] = x[:, i] / (bias + alpha / size * sq) ** beta
    return out


def _run(x: np.ndarray, **attrs: object) -> np.ndarray:
    with Graph("lrn") as g:
        t = g.input("x", list(x.shape), "float64")
        ops.lrn(t, name="y", **attrs)
    return np.asarray(run_serial(g, {"x": x})["y"])


@pytest.mark.parametrize("size", [1, 2, 5])
def test_kernel_equals_the_definition(size: int) -> None:
    x = np.random.default_rng(0).standard_normal((2, 7, 3, 4))
    got = _run(x, n=size, k=2.0, alpha=1e-2 / size, beta=0.75)
    np.testing.assert_allclose(got, _direct(x, size, 1e-2, 0.75, 2.0), rtol=1e-13)


def test_channels_last_equals_channels_first() -> None:
    x = np.random.default_rng(1).standard_normal((2, 6, 3, 4))
    first = _run(x, n=3, k=1.0, alpha=0.1, beta=0.5)
    last = _run(np.moveaxis(x, 1, -1).copy(), n=3, k=1.0, alpha=0.1, beta=0.5, data_format="NHWC")
    np.testing.assert_allclose(np.moveaxis(last, -1, 1), first, rtol=1e-13)


def test_rule_keeps_batch_and_spatial_replicates_channels() -> None:
    rule = sr.get_rule("lrn")
    x = sr.TensorSpec([4, 8, 6, 6], sr.DistAttr(MESH, [0, 1, -1, -1]))
    info = rule.infer_forward(x, n=5)
    assert info.inputs[0].dims_mapping == (0, -1, -1, -1)
    assert info.outputs[0].dims_mapping == (0, -1, -1, -1)
    sp = sr.TensorSpec([1, 8, 6, 6], sr.DistAttr(MESH, [-1, -1, 0, 1]))
    assert rule.infer_forward(sp, n=5).outputs[0].dims_mapping == (-1, -1, 0, 1)
    last = sr.TensorSpec([4, 6, 6, 8], sr.DistAttr(MESH, [0, -1, -1, 1]))
    assert rule.infer_forward(last, n=5, data_format="NHWC").outputs[0].dims_mapping == (
        0, -1, -1, -1)


def test_bad_input_is_a_typed_error() -> None:
    with Graph("bad") as g, pytest.raises(sr.SpmdError, match="rank"):
        ops.lrn(g.input("x", [3, 4], "float64"))
