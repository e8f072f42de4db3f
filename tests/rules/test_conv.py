"""The convolution and pooling rules: Paddle's quirks reproduced, and each deviation class
proven by execution (scatter by the attributes, run the numpy kernel per block, gather by the
output attributes: Paddle's answers give another result than the serial op, ours the serial one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from spmdrules.rules import conv as rules

import spmdrules as sr
from spmdrules.core.shards import ShardMismatch, coords, gather, scatter
from spmdrules.execution.local import LocalContext, get_kernel

MESH = sr.ProcessMesh([0, 1], dim_names=["x"])
MESH2 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
MESH24 = sr.ProcessMesh.from_shape([2, 4])
RNG = np.random.default_rng(0)


def _attr(mesh: sr.ProcessMesh, m: Sequence[int], partial: dict[int, str] | None = None
          ) -> sr.DistAttr:
    return sr.DistAttr(mesh, list(m), partial or {})


def _execute(op: str, values: Sequence[np.ndarray], ins: Sequence[sr.DistAttr],
             outs: Sequence[sr.DistAttr], out_shapes: Sequence[tuple[int, ...]],
             attrs: dict[str, Any]) -> list[np.ndarray]:
    """Run ``op``'s kernel on every block (no halo) and gather by ``outs``."""
    rule = sr.get_rule(op)
    full = {a.name: a.default for a in rule.attrs} | attrs
    scattered = [scatter(v, a, RNG) for v, a in zip(values, ins, strict=True)]
    results = {}
    for c in coords(ins[0]):
        ctx = LocalContext(op, ins[0].mesh, c, tuple(v.shape for v in values), tuple(ins),
                           tuple(out_shapes), tuple(outs), full)
        results[c] = get_kernel(op)(ctx, [s[c] for s in scattered])
    return [gather({c: r[k] for c, r in results.items()}, shape, a)
            for k, (shape, a) in enumerate(zip(out_shapes, outs, strict=True))]


def _serial(op: str, values: Sequence[np.ndarray], out_shapes: Sequence[tuple[int, ...]],
            attrs: dict[str, Any]) -> list[np.ndarray]:
    ins = [sr.DistAttr(MESH, [-1] * v.ndim) for v in values]
    outs = [sr.DistAttr(MESH, [-1] * len(s)) for s in out_shapes]
    return _execute(op, values, ins, outs, out_shapes, attrs)


def _wrong(op: str, values: Sequence[np.ndarray], info: Any, out_shapes: Sequence[Any],
           attrs: dict[str, Any]) -> bool:
    """Does executing under ``info`` fail to give the serial result?"""
    want = _serial(op, values, out_shapes, attrs)
    try:
        got = _execute(op, values, info.inputs, info.outputs, out_shapes, attrs)
    except (ShardMismatch, sr.SpmdError, ValueError):
        return True
    return not all(g.shape == w.shape and np.allclose(g, w, atol=1e-12)
                   for g, w in zip(got, want, strict=True))


def _paddle(op: str, *args: Any, fmt: str, groups: int = 1, grad: bool = False,
            reverse: bool = False) -> Any:
    quirks = frozenset(rules.QUIRKS)
    if grad:
        return rules.grad_answer(op + "_grad", *args, fmt, groups, False, quirks)
    if reverse:
        return rules.reverse_answer(op, *args, fmt, groups, False, quirks)
    return rules.forward_answer(op, *args, fmt, groups, False, quirks)


def test_deviation_spatial_kept_paddle_wrong_ours_right() -> None:
    """conv2d/forward: H sharded, 3x3 kernel. Paddle keeps H sharded on the output with no halo:
    the kernel cannot compute a block's windows that read the neighbour's rows."""
    x, f = RNG.standard_normal((2, 3, 8, 6)), RNG.standard_normal((4, 3, 3, 3))
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1, -1, 0, -1]))
    fs = sr.TensorSpec(f.shape, _attr(MESH, [-1, -1, -1, -1]))
    out = [(2, 4, 6, 4)]
    paddle = _paddle("conv2d", xs, fs, fmt="NCHW")
    assert paddle.outputs[0].dims_mapping == (-1, -1, 0, -1)
    assert _wrong("conv2d", [x, f], paddle, out, {})
    ours = sr.get_rule("conv2d").infer_forward(xs, fs)
    assert ours.outputs[0].dims_mapping == (-1, -1, -1, -1)
    assert not _wrong("conv2d", [x, f], ours, out, {})
    # the opt-in keeps the shard; with the halo the lowering exchanges it computes the serial op
    opt = sr.get_rule("conv2d").infer_forward(xs, fs, spatial_sharding=True)
    assert opt.outputs[0].dims_mapping == (-1, -1, 0, -1)


def test_deviation_kernel_sharded_paddle_wrong_ours_right() -> None:
    """conv3d/forward: the filter's kernel dim sharded. Paddle shards the input's and output's
    D with it; a kernel piece computes windows of another size."""
    x, f = RNG.standard_normal((1, 2, 6, 4, 4)), RNG.standard_normal((3, 2, 2, 1, 1))
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1] * 5))
    fs = sr.TensorSpec(f.shape, _attr(MESH, [-1, -1, 0, -1, -1]))
    paddle = _paddle("conv3d", xs, fs, fmt="NCDHW")
    assert paddle.outputs[0].dims_mapping == (-1, -1, 0, -1, -1)
    out = [(1, 3, 5, 4, 4)]
    assert _wrong("conv3d", [x, f], paddle, out, {})
    ours = sr.get_rule("conv3d").infer_forward(xs, fs)
    assert not _wrong("conv3d", [x, f], ours, out, {})


def test_deviation_channels_first_output_paddle_wrong_ours_right() -> None:
    """conv3d NDHWC with the filter's output channels sharded: Paddle shards output dim 1 (D)."""
    x, f = RNG.standard_normal((1, 3, 3, 3, 2)), RNG.standard_normal((4, 2, 1, 1, 1))
    attrs = {"data_format": "NDHWC"}
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1] * 5))
    fs = sr.TensorSpec(f.shape, _attr(MESH, [0, -1, -1, -1, -1]))
    paddle = _paddle("conv3d", xs, fs, fmt="NDHWC")
    assert paddle.outputs[0].dims_mapping == (-1, 0, -1, -1, -1)
    out = [(1, 3, 3, 3, 4)]
    assert _wrong("conv3d", [x, f], paddle, out, attrs)
    ours = sr.get_rule("conv3d").infer_forward(xs, fs, **attrs)
    assert ours.outputs[0].dims_mapping == (-1, -1, -1, -1, 0)
    assert not _wrong("conv3d", [x, f], ours, out, attrs)


def test_deviation_grouped_channel_paddle_wrong_ours_right() -> None:
    """conv2d_transpose with groups=2 and the input channels sharded like the filter's."""
    x, f = RNG.standard_normal((1, 4, 3, 3)), RNG.standard_normal((4, 1, 2, 2))
    attrs = {"groups": 2}
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1, 0, -1, -1]))
    fs = sr.TensorSpec(f.shape, _attr(MESH, [0, -1, -1, -1]))
    paddle = _paddle("conv2d_transpose", xs, fs, fmt="NCHW", groups=2)
    out = [(1, 2, 4, 4)]
    assert paddle.outputs[0].partial_items == ((0, "sum"),)
    assert _wrong("conv2d_transpose", [x, f], paddle, out, attrs)
    ours = sr.get_rule("conv2d_transpose").infer_forward(xs, fs, **attrs)
    assert not _wrong("conv2d_transpose", [x, f], ours, out, attrs)


def test_deviation_grad_three_merges_paddle_wrong_ours_right() -> None:
    """depthwise_conv2d_grad with the output channels sharded: Paddle's input_grad is replicated
    (no pending sum) while each rank holds only its channels' part."""
    x, f = RNG.standard_normal((1, 2, 4, 4)), RNG.standard_normal((2, 1, 3, 3))
    g = RNG.standard_normal((1, 2, 2, 2))
    attrs = {"groups": 2}
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1] * 4))
    fs = sr.TensorSpec(f.shape, _attr(MESH, [0, -1, -1, -1]))
    gs = sr.TensorSpec(g.shape, _attr(MESH, [-1, 0, -1, -1]))
    paddle = _paddle("depthwise_conv2d", xs, fs, gs, fmt="NCHW", groups=2, grad=True)
    out = [x.shape, f.shape]
    assert _wrong("depthwise_conv2d_grad", [x, f, g], paddle, out, attrs)
    ours = sr.get_rule("depthwise_conv2d_grad").infer_forward(xs, fs, gs, **attrs)
    assert not _wrong("depthwise_conv2d_grad", [x, f, g], ours, out, attrs)


def test_deviation_reverse_keeps_partial_paddle_wrong_ours_right() -> None:
    """conv2d/reverse with a pending output: the inputs Paddle infers compute a complete output,
    which its partial status sums again."""
    x, f = RNG.standard_normal((2, 3, 5, 5)), RNG.standard_normal((2, 3, 3, 3))
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1] * 4))
    fs = sr.TensorSpec(f.shape, _attr(MESH, [-1] * 4))
    os_ = sr.TensorSpec((2, 2, 3, 3), _attr(MESH, [-1] * 4, {0: "sum"}))
    paddle = _paddle("conv2d", xs, fs, os_, fmt="NCHW", reverse=True)
    assert paddle.outputs[0].partial_items == ((0, "sum"),)
    out = [(2, 2, 3, 3)]
    assert _wrong("conv2d", [x, f], paddle, out, {})
    ours = sr.get_rule("conv2d").infer_reverse(xs, fs, os_)
    assert not _wrong("conv2d", [x, f], ours, out, {})


def test_the_gradient_replicates_a_split_size_one_filter_channel_as_paddle() -> None:
    """Issue 23 item 15, depthwise_conv2d/reverse/8 (mesh [2]): the filter's one input channel
    (size 1) given split. Paddle's gradient rule answers everything replicated, which executes;
    ours refused it. A size-1 dim has nothing to split: ours now replicates it, as Paddle."""
    mesh = sr.ProcessMesh([0, 1])
    x, f = RNG.standard_normal((4, 3, 5, 4)), RNG.standard_normal((3, 1, 1, 1))
    g = RNG.standard_normal((4, 3, 5, 4))
    attrs = {"groups": 3}
    xs = sr.TensorSpec(x.shape, _attr(mesh, [-1] * 4))
    fs = sr.TensorSpec(f.shape, _attr(mesh, [-1, 0, -1, -1]))
    gs = sr.TensorSpec(g.shape, _attr(mesh, [-1] * 4))
    ours = sr.get_rule("depthwise_conv2d_grad").infer_forward(xs, fs, gs, **attrs)
    rep = _attr(mesh, [-1] * 4)
    assert list(ours.inputs) == [rep] * 3 and list(ours.outputs) == [rep] * 2  # Paddle's answer
    assert not _wrong("depthwise_conv2d_grad", [x, f, g], ours, [x.shape, f.shape], attrs)
    # with the output channels split, the input gradient is a pending sum over them
    gs = sr.TensorSpec(g.shape, _attr(mesh, [-1, 0, -1, -1]))
    ours = sr.get_rule("depthwise_conv2d_grad").infer_forward(xs, fs, gs, **attrs)
    assert ours.inputs[1].dims_mapping == (0, -1, -1, -1)
    assert not _wrong("depthwise_conv2d_grad", [x, f, g], ours, [x.shape, f.shape], attrs)
    # the forward rule refuses the split, as Paddle's does (an error naming the fix)
    with pytest.raises(sr.SpmdError, match="replicate it"):
        sr.get_rule("depthwise_conv2d").infer_forward(xs, fs, **attrs)


def test_the_gradient_answers_where_paddle_s_shared_letter_conflicts() -> None:
    """depthwise_conv2d/reverse/37 (mesh [2,4]): the split size-1 filter channel's shared '1'
    claims mesh dim 1 in Paddle's merges, which then conflict: Paddle refuses. Ours, one merge,
    answers (it refused too until issue 23, for the split size-1 dim), and the answer executes."""
    x, f = RNG.standard_normal((2, 4, 6, 7)), RNG.standard_normal((4, 1, 1, 1))
    g = RNG.standard_normal((2, 4, 6, 7))
    attrs = {"groups": 4}
    xs = sr.TensorSpec(x.shape, _attr(MESH24, [-1, 0, -1, -1]))
    fs = sr.TensorSpec(f.shape, _attr(MESH24, [-1, 1, 0, -1]))
    gs = sr.TensorSpec(g.shape, _attr(MESH24, [-1, -1, -1, 0]))
    with pytest.raises(sr.SpmdError):
        _paddle("depthwise_conv2d", xs, fs, gs, fmt="NCHW", groups=4, grad=True)
    ours = sr.get_rule("depthwise_conv2d_grad").infer_forward(xs, fs, gs, **attrs)
    assert not _wrong("depthwise_conv2d_grad", [x, f, g], ours, [x.shape, f.shape], attrs)


@pytest.mark.parametrize(("bad", "match"), [
    ({"x": [2, 3, 8]}, "rank"), ({"data_format": "NDHWC"}, "data_format"),
    ({"groups": 0}, "groups"),
])
def test_typed_errors_name_the_op_and_the_fix(bad: dict[str, Any], match: str) -> None:
    shape = bad.pop("x", [2, 3, 8, 8])
    xs = sr.TensorSpec(shape, _attr(MESH, [-1] * len(shape)))
    fs = sr.TensorSpec([4, 3, 3, 3], _attr(MESH, [-1] * 4))
    with pytest.raises(sr.SpmdError, match=match):
        sr.get_rule("conv2d").infer_forward(xs, fs, **bad)


def test_channel_mismatch_is_refused_as_paddle_does() -> None:
    xs = sr.TensorSpec([2, 4, 8, 8], _attr(MESH2, [-1, 0, -1, -1]))
    fs = sr.TensorSpec([4, 4, 3, 3], _attr(MESH2, [-1, 1, -1, -1]))
    with pytest.raises(sr.SpmdError, match="input channel"):
        sr.get_rule("conv2d").infer_forward(xs, fs)


def test_adaptive_pooling_reduces_across_a_sharded_dim() -> None:
    """Global and adaptive pooling over a sharded H: pending max (max) or sum (avg), and the
    pieces, reduced, are the serial result on uneven blocks."""
    x = RNG.standard_normal((2, 3, 7, 5))
    xs = sr.TensorSpec(x.shape, _attr(MESH, [-1, -1, 0, -1]))
    for attrs, shape in (({"kernel_size": [1, 1], "global_pooling": True,
                           "pooling_type": "avg"}, (2, 3, 1, 1)),
                         ({"kernel_size": [3, 2], "adaptive": True}, (2, 3, 3, 2))):
        info = sr.get_rule("pool2d").infer_forward(xs, **attrs)
        rt = "sum" if attrs.get("pooling_type") == "avg" else "max"
        assert info.outputs[0].partial_items == ((0, rt),)
        assert not _wrong("pool2d", [x], info, [shape], attrs)
