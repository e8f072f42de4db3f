"""The ONNX window ops onto registered ops: Conv, ConvTranspose, MaxPool, AveragePool and the
global pools (converters registered into :data:`~spmdrules.importers.onnx_ops.OPS`).

ONNX's ``pads`` ``[x1_begin, x2_begin, x1_end, x2_end]`` become the graph's ``[x1_begin, x1_end,
x2_begin, x2_end]``, ``auto_pad`` explicit paddings, AveragePool's ``count_include_pad`` is
``exclusive``'s negation; the importer's ``spatial_sharding`` is every convolution's opt-in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.channel_maps import biased_conv
from spmdrules.importers.onnx_ops import Ctx, Value, int_list, onnx_op


def _window_attrs(c: Ctx, x: Tensor, kernel: Sequence[int], *, conv: bool) -> dict[str, Any]:
    nsp = x.ndim - 2
    strides = int_list(c.attr("strides", [1] * nsp))
    dil = int_list(c.attr("dilations", [1] * nsp))
    auto = c.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        p = int_list(c.attr("pads", [0] * 2 * nsp))
        before, after = p[:nsp], p[nsp:]
    elif auto == "VALID":
        before, after = [0] * nsp, [0] * nsp
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        before, after = [], []
        for n, k, s, d in zip(x.shape[2:], kernel, strides, dil, strict=True):
            total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small = total // 2
            before.append(small if auto == "SAME_UPPER" else total - small)
            after.append(total - before[-1])
    else:
        raise c.fail(f"auto_pad {auto!r} is not an ONNX value")
    out: dict[str, Any] = {"strides": strides,
                           "paddings": [v for ba in zip(before, after, strict=True) for v in ba]}
    if conv:
        out["dilations"] = dil
    elif any(d != 1 for d in dil):
        raise c.fail(f"dilations {dil}: the registered pools have no dilation")
    return out


@onnx_op("Conv")
def _conv(c: Ctx) -> list[Value]:
    x, w = c.tensor(0), c.tensor(1)
    if x.ndim not in (4, 5):
        raise c.fail(f"input rank {x.ndim}: only 2-D and 3-D convolutions (rank 4, 5) are "
                     "registered (conv2d, conv3d)")
    k = list(w.shape[2:])
    if "kernel_shape" in c.attrs and int_list(c.attr("kernel_shape")) != k:
        raise c.fail(f"kernel_shape {c.attr('kernel_shape')} differs from the weight's {k}")
    op = "conv2d" if x.ndim == 4 else "conv3d"
    attrs = _window_attrs(c, x, k, conv=True)
    return _biased(c, op, x, w, groups=int(c.attr("group", 1)), **attrs)


def _biased(c: Ctx, op: str, x: Tensor, w: Tensor, **attrs: Any) -> list[Value]:
    """``op`` (a convolution) of x and w, plus the optional bias input 2."""
    return [biased_conv(c, op, x, w, c.tensor(2) if c.has(2) else None,
                        spatial_sharding=c.imp.spatial_sharding, **attrs)]


@onnx_op("ConvTranspose")
def _conv_transpose(c: Ctx) -> list[Value]:
    """conv2d_transpose. ``output_shape`` (or ``auto_pad`` SAME_*) sets the pads as ONNX's spec
    says: ``total = stride (in - 1) + output_padding + dilation (k - 1) + 1 - out``, the odd
    unit at the end for SAME_UPPER, at the start otherwise; ``pads`` are then ignored."""
    x, w = c.tensor(0), c.tensor(1)
    if x.ndim != 4:
        raise c.fail(f"input rank {x.ndim}: only the 2-D transposed convolution (rank 4) is "
                     "registered (conv2d_transpose)")
    nsp = 2
    k = list(w.shape[2:])
    if "kernel_shape" in c.attrs and int_list(c.attr("kernel_shape")) != k:
        raise c.fail(f"kernel_shape {c.attr('kernel_shape')} differs from the weight's {k}")
    strides = int_list(c.attr("strides", [1] * nsp))
    dil = int_list(c.attr("dilations", [1] * nsp))
    opad = int_list(c.attr("output_padding", [0] * nsp))
    auto = c.attr("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise c.fail(f"auto_pad {auto!r} is not an ONNX value")
    shape = c.attr("output_shape")
    if shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = [n * s for n, s in zip(x.shape[2:], strides, strict=True)]
    if shape is not None:
        shape = int_list(shape)[-nsp:]  # output_shape may hold N and C too
        before, after = [], []
        for n, kk, s, d, o, want in zip(x.shape[2:], k, strides, dil, opad, shape, strict=True):
            total = s * (n - 1) + o + d * (kk - 1) + 1 - want
            if total < 0:
                raise c.fail(f"output_shape {shape} is longer than the transposed convolution "
                             f"gives without padding ({want + total} at most); give "
                             "output_padding instead")
            small = total // 2
            before.append(small if auto == "SAME_UPPER" else total - small)
            after.append(total - before[-1])
    elif auto == "VALID":
        before = after = [0] * nsp
    else:
        p = int_list(c.attr("pads", [0] * 2 * nsp))
        before, after = p[:nsp], p[nsp:]
    return _biased(c, "conv2d_transpose", x, w, groups=int(c.attr("group", 1)), strides=strides,
                   dilations=dil, output_padding=opad,
                   paddings=[v for ba in zip(before, after, strict=True) for v in ba])


def _pool(c: Ctx, kind: str) -> list[Value]:
    x = c.tensor(0)
    if x.ndim not in (4, 5):
        raise c.fail(f"input rank {x.ndim}: only 2-D and 3-D pools are registered")
    if len(c.node.output) > 1 and c.node.output[1]:
        raise c.fail("MaxPool's Indices output is not mapped")
    if int(c.attr("storage_order", 0)) != 0:
        raise c.fail("storage_order=1 (column-major indices) is not mapped")
    k = int_list(c.attr("kernel_shape"))
    attrs = _window_attrs(c, x, k, conv=False)
    return [c.call("pool2d" if x.ndim == 4 else "pool3d", x, kernel_size=k, pooling_type=kind,
                   ceil_mode=bool(c.attr("ceil_mode", 0)),
                   exclusive=not bool(c.attr("count_include_pad", 0)), **attrs)]


@onnx_op("MaxPool")
def _maxpool(c: Ctx) -> list[Value]:
    return _pool(c, "max")


@onnx_op("AveragePool")
def _avgpool(c: Ctx) -> list[Value]:
    return _pool(c, "avg")


def _global(c: Ctx, kind: str) -> list[Value]:
    x = c.tensor(0)
    if x.ndim not in (4, 5):
        raise c.fail(f"input rank {x.ndim}: only 2-D and 3-D pools are registered")
    return [c.call("pool2d" if x.ndim == 4 else "pool3d", x, kernel_size=[1] * (x.ndim - 2),
                   global_pooling=True, pooling_type=kind)]


@onnx_op("GlobalAveragePool")
def _gap(c: Ctx) -> list[Value]:
    return _global(c, "avg")


@onnx_op("GlobalMaxPool")
def _gmp(c: Ctx) -> list[Value]:
    return _global(c, "max")
