"""Local kernels of roi_align and its backward op: bilinear pooling of each box's window.

As Paddle's CPU kernel: box coordinates are scaled by ``spatial_scale`` (and shifted by half a
pixel when ``aligned``; otherwise a box is at least 1 x 1); each of the pooled_height x
pooled_width bins averages ``sampling_ratio`` x ``sampling_ratio`` bilinear samples
(``ceil(box size / pooled size)`` per side when sampling_ratio <= 0); a sample beyond one pixel
outside the image counts 0. Box ``r`` belongs to the image whose running count of boxes_num
passes it. Each box's pooling is a fixed matrix over its image's pixels, so the kernel and its
adjoint share it. The rule splits only the channels, which the kernel handles as they come.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def _bilinear(y: float, x: float, h: int, w: int, row: Array, weight: float) -> None:
    """Add ``weight`` times the bilinear sample at (y, x) to ``row`` (an [h * w] pixel row)."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1.0 - ly, 1.0 - lx
    for yy, xx, c in ((yl, xl, hy * hx), (yl, xh, hy * lx), (yh, xl, ly * hx), (yh, xh, ly * lx)):
        row[yy * w + xx] += weight * c


def pooling_matrix(box: Array, h: int, w: int, attrs: dict[str, object]) -> Array:
    """[pooled_height * pooled_width, h * w]: each bin's average of its bilinear samples."""
    ph, pw = int(attrs["pooled_height"]), int(attrs["pooled_width"])  # type: ignore[call-overload]
    scale = float(attrs["spatial_scale"])  # type: ignore[arg-type]
    ratio = int(attrs["sampling_ratio"])  # type: ignore[call-overload]
    aligned = bool(attrs["aligned"])
    off = 0.5 if aligned else 0.0
    x0, y0, x1, y1 = (float(v) * scale - off for v in box)
    rw, rh = x1 - x0, y1 - y0
    if not aligned:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    bh, bw = rh / ph, rw / pw
    gh = ratio if ratio > 0 else max(math.ceil(rh / ph), 0)
    gw = ratio if ratio > 0 else max(math.ceil(rw / pw), 0)
    count = max(gh * gw, 1)
    m = np.zeros((ph * pw, h * w))
    for i in range(ph):
        for j in range(pw):
            for iy in range(gh):
                y = y0 + i * bh + (iy + 0.5) * bh / gh
                for ix in range(gw):
                    _bilinear(y, x0 + j * bw + (ix + 0.5) * bw / gw, h, w, m[i * pw + j],
                              1.0 / count)
    return m


def box_images(ctx: LocalContext, boxes_num: Array, n_boxes: int) -> Array:
    """The image of each box, from the running count of boxes_num."""
    ends = np.cumsum(boxes_num)
    img = np.searchsorted(ends, np.arange(n_boxes), side="right")
    if n_boxes and (ends[-1] != n_boxes):
        raise local.KernelInputError(
            f"{ctx.op}: boxes_num counts {int(ends[-1])} boxes but boxes holds {n_boxes}; give "
            "boxes_num the number of boxes of each image"
        )
    return img


def _whole(ctx: LocalContext, names: Sequence[tuple[int, str, Sequence[int]]]) -> None:
    for i, name, dims in names:
        local.require_whole(ctx, i, name)
        local.require_full_dims(ctx, i, name, dims, "a box reads its image anywhere")


@register_kernel("roi_align")
def roi_align(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, boxes, num = (array(ctx, blocks, i, n) for i, n in enumerate(("x", "boxes", "boxes_num")))
    _whole(ctx, [(0, "x", [0, 2, 3]), (1, "boxes", [0, 1]), (2, "boxes_num", [0])])
    _n, c, h, w = x.shape
    ph, pw = int(ctx.attrs["pooled_height"]), int(ctx.attrs["pooled_width"])
    img = box_images(ctx, num, boxes.shape[0])
    out = np.zeros((boxes.shape[0], c, ph, pw), dtype=x.dtype)
    for r in range(boxes.shape[0]):
        m = pooling_matrix(boxes[r], h, w, ctx.attrs)
        out[r] = (x[img[r]].reshape(c, h * w) @ m.T).reshape(c, ph, pw)
    return (out,)


def x_gradient(ctx: LocalContext, x: Array, boxes: Array, num: Array, g: Array) -> Array:
    """The adjoint of roi_align in x: each box's bins spread back through its matrix."""
    _n, c, h, w = x.shape
    img = box_images(ctx, num, boxes.shape[0])
    gx = np.zeros_like(x)
    for r in range(boxes.shape[0]):
        m = pooling_matrix(boxes[r], h, w, ctx.attrs)
        gx[img[r]] += (g[r].reshape(c, m.shape[0]) @ m).reshape(c, h, w)
    return gx


@register_kernel("roi_align_grad")
def roi_align_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, boxes, num, g = (array(ctx, blocks, i, n) for i, n in
                        enumerate(("x", "boxes", "boxes_num", "out_grad")))
    _whole(ctx, [(0, "x", [0, 2, 3]), (1, "boxes", [0, 1]), (2, "boxes_num", [0]),
                 (3, "out_grad", [0, 2, 3])])
    return (x_gradient(ctx, x, boxes, num, g),)
