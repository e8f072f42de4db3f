"""roi_align and its gradient rule: only the channels stay split, typed errors, the kernel on a
box that covers whole pixels, every op attribute carried."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
ROI = sr.get_rule("roi_align")
GRAD = sr.get_rule("roi_align_grad")
ATTRS = {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 1.0, "sampling_ratio": 2,
         "aligned": False}


def spec(shape: list[int], dm: list[int]) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm))


def dms(info: sr.SpmdInfo) -> list[Any]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_only_the_channels_stay_split() -> None:
    info = ROI.infer_forward(spec([4, 8, 16, 16], [0, 1, -1, -1]), spec([6, 4], [0, -1]),
                             spec([4], [0]), **ATTRS)
    assert dms(info) == [[-1, 1, -1, -1], [-1, -1], [-1], [-1, 1, -1, -1]]
    assert not ROI.has_reverse


def test_gradient_rule_merges_x_and_out_grad_channels() -> None:
    x, b, n = spec([4, 8, 16, 16], [-1, -1, 0, -1]), spec([6, 4], [-1, -1]), spec([4], [-1])
    info = GRAD.infer_forward(x, b, n, spec([6, 8, 2, 2], [1, 0, -1, -1]), **ATTRS)
    assert dms(info) == [[-1, 0, -1, -1], [-1, -1], [-1], [-1, 0, -1, -1], [-1, 0, -1, -1]]
    with pytest.raises(ShardingConflictError, match="'c'"):
        GRAD.infer_forward(spec([4, 8, 16, 16], [-1, 1, -1, -1]), b, n,
                           spec([6, 8, 2, 2], [-1, 0, -1, -1]), **ATTRS)


def test_bad_shapes_are_typed_errors() -> None:
    with pytest.raises(RuleArgumentError, match="boxes"):
        ROI.infer_forward(spec([4, 8, 16, 16], [-1] * 4), spec([6, 5], [-1, -1]), spec([4], [-1]),
                          **ATTRS)
    with pytest.raises(RuleArgumentError, match="4-D"):
        ROI.infer_forward(spec([4, 8, 16], [-1] * 3), spec([6, 4], [-1, -1]), spec([4], [-1]),
                          **ATTRS)


def test_kernel_averages_bilinear_samples_and_carries_every_attribute() -> None:
    # one box over pixels [0, 2] x [0, 2] of a 1-channel ramp: a linear image samples exactly
    img = np.arange(16.0).reshape(1, 1, 4, 4)
    with Graph("roi") as g:
        out = ops.roi_align(g.input("x", [1, 1, 4, 4], "float64"), g.input("b", [1, 4], "float64"),
                            g.input("n", [1], "int64"), pooled_height=1, pooled_width=1,
                            spatial_scale=1.0, sampling_ratio=2, aligned=False)
    got = run_serial(g, {"x": img, "b": np.array([[0.0, 0.0, 2.0, 2.0]]), "n": np.array([1])})
    # samples at 0.5 and 1.5 on each side: the mean of the ramp 4 y + x there is 4 + 1 = 5
    np.testing.assert_allclose(got[out.name].reshape(()), 5.0, atol=1e-12)
    assert out.producer.attr_dict["sampling_ratio"] == 2  # type: ignore[union-attr]


def test_a_split_channel_layout_executes() -> None:
    x, b, n = spec([2, 4, 5, 4], [-1, 0, -1, -1]), spec([3, 4], [-1, -1]), spec([2], [-1])
    info = ROI.infer_forward(x, b, n, **ATTRS)
    doms = ("real", "boxes:5:4", "counts:2:3")
    assert execute("roi_align", [x, b, n], info, ATTRS, doms) == "ok"
