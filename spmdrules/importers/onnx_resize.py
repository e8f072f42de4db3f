"""ONNX ``Resize`` onto the upsample family (``rules/upsample.py``): the nearest and linear modes
whose source index Paddle's interp kernels compute (converter registered into
:data:`~spmdrules.importers.onnx_ops.OPS`).

| mode | coordinate_transformation_mode | nearest_mode | becomes |
|---|---|---|---|
| nearest | asymmetric | floor | nearest_interp, align_corners False |
| nearest | align_corners | round_prefer_ceil | nearest_interp, align_corners True |
| linear (rank 4) | half_pixel, pytorch_half_pixel | | bilinear_interp, align_mode 0 |
| linear (rank 4) | align_corners | | bilinear_interp, align_corners True |
| linear (rank 4) | asymmetric | | bilinear_interp, align_mode 1 |

``pytorch_half_pixel`` reads an output of length 1 at 0, as Paddle does; ``half_pixel`` reads it
at the input's middle, so that case is refused. The batch and channel scales must be 1. A
``scales`` input becomes Paddle's ``scale`` where Paddle's output length ``int(in * scale)`` is
ONNX's ``floor(in * scale)``; ``sizes`` the output size. Anything else (cubic, antialias, axes,
a keep_aspect_ratio_policy, tf_crop_and_resize, other rounding) is refused with its attribute.
"""

from __future__ import annotations

import math
from typing import Any

from spmdrules.engine.resampling import SIZE_ATTRS, out_lengths
from spmdrules.importers.onnx_ops import Ctx, Value, onnx_op

_LAYOUT = {3: "NCW", 4: "NCHW", 5: "NCDHW"}
#: (mode, coordinate_transformation_mode) -> (op, align_corners, align_mode)
_MODES = {
    ("nearest", "asymmetric"): ("nearest_interp", False, 1),
    ("nearest", "align_corners"): ("nearest_interp", True, 1),
    ("linear", "half_pixel"): ("bilinear_interp", False, 0),
    ("linear", "pytorch_half_pixel"): ("bilinear_interp", False, 0),
    ("linear", "align_corners"): ("bilinear_interp", True, 1),
    ("linear", "asymmetric"): ("bilinear_interp", False, 1),
}


def _refuse_unmapped_attrs(c: Ctx) -> None:
    if c.opset < 11:
        raise c.fail(f"opset {c.opset}: Resize before opset 11 has no coordinate mode; "
                     "export with opset >= 11")
    if int(c.attr("antialias", 0)):
        raise c.fail("antialias=1 is not mapped (Paddle's interp has no antialiasing filter)")
    if c.attr("axes") is not None:
        raise c.fail(f"axes {c.attr('axes')} is not mapped; resize every dim (scales of 1 on "
                     "the batch and channels)")
    if c.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise c.fail(f"keep_aspect_ratio_policy {c.attr('keep_aspect_ratio_policy')!r} is not "
                     "mapped; give the output sizes")


def _interp(c: Ctx, ndim: int) -> tuple[str, str, bool, int]:
    """Paddle's interp op for the node's mode and coordinates: (op, coordinate mode,
    align_corners, align_mode); a combination Paddle computes differently is refused."""
    mode = c.attr("mode", "nearest")
    coord = c.attr("coordinate_transformation_mode", "half_pixel")
    rounding = c.attr("nearest_mode", "round_prefer_floor")
    if (mode, coord) not in _MODES:
        raise c.fail(f"mode {mode!r} with coordinate_transformation_mode {coord!r} is not "
                     f"mapped; mapped: {sorted(_MODES)}")
    op, corners, align_mode = _MODES[(mode, coord)]
    if mode == "nearest" and rounding != ("round_prefer_ceil" if corners else "floor"):
        raise c.fail(f"nearest_mode {rounding!r} with {coord!r}: Paddle's nearest rounds "
                     f"{'half up' if corners else 'down'}; use nearest_mode "
                     f"{'round_prefer_ceil' if corners else 'floor'!r}")
    if ndim not in (3, 4, 5) or (op == "bilinear_interp" and ndim != 4):
        raise c.fail(f"input rank {ndim}: {mode} Resize is mapped for rank "
                     f"{'4 (bilinear)' if mode == 'linear' else '3 to 5'}")
    return op, coord, corners, align_mode


def _sized(c: Ctx, op: str, shape: list[int]) -> tuple[list[int], dict[str, Any]]:
    """The output's spatial lengths and the interp op's size attributes, from the sizes input
    or else the scales input."""
    ndim, ins = len(shape), shape[2:]
    if c.has(3):
        sizes = c.ints(3, "sizes")
        if len(sizes) != ndim or sizes[:2] != shape[:2]:
            raise c.fail(f"sizes {sizes} must give every dim of the rank-{ndim} input and keep "
                         f"its batch and channels {shape[:2]}")
        return sizes[2:], dict(zip(SIZE_ATTRS[ndim - 2], sizes[2:], strict=True))
    if not c.has(2):
        raise c.fail("neither scales nor sizes is given")
    scales = [float(s) for s in c.static(2).reshape(-1)]
    if len(scales) != ndim or scales[:2] != [1.0, 1.0] or \
            not all(math.isfinite(v) and v > 0 for v in scales):
        raise c.fail(f"scales {scales} must give every dim of the rank-{ndim} input, 1 on "
                     "the batch and channels and finite and > 0 elsewhere")
    outs = [math.floor(n * s) for n, s in zip(ins, scales[2:], strict=True)]
    if list(out_lengths(op, ins, {"scale": scales[2:]})) != outs:
        raise c.fail(f"scales {scales[2:]} over {ins}: ONNX's output {outs} is not Paddle's "
                     "int(in * scale); give the sizes input instead")
    return outs, {"scale": scales[2:]}


@onnx_op("Resize")
def _resize(c: Ctx) -> list[Value]:
    _refuse_unmapped_attrs(c)
    x = c.tensor(0)
    op, coord, corners, align_mode = _interp(c, x.ndim)
    ins = list(x.shape[2:])
    outs, sized = _sized(c, op, list(x.shape))
    if coord == "half_pixel" and any(o == 1 < n for n, o in zip(ins, outs, strict=True)):
        raise c.fail(f"half_pixel to an output of length 1 ({ins} -> {outs}) reads the input's "
                     "middle; Paddle reads row 0 (as pytorch_half_pixel does)")
    return [c.call(op, x, data_format=_LAYOUT[x.ndim], align_corners=corners,
                   align_mode=align_mode, **sized)]
