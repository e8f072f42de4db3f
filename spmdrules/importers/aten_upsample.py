"""ATen's upsampling onto the upsample family (``rules/upsample.py``): ``upsample_nearest1d/2d/3d``
and ``upsample_bilinear2d``, their ``.vec`` overloads (which ``torch.export`` keeps: the U-Net's
``nn.Upsample``) and the ``.default`` ones.

torch's source index is Paddle's: nearest ``floor(j * ratio)`` (Paddle's ``align_corners``
False), bilinear half-pixel clamped at 0 (``align_mode`` 0) or ``align_corners``, with the ratio
``1 / scale`` where a scale is given, else ``in / out``. A scale becomes Paddle's ``scale`` where
Paddle's output length ``int(in * scale)`` is torch's; otherwise the output size, where the ratio
``in / out`` equals ``1 / scale`` in float32; anything else is refused. So is a half-pixel
bilinear to a single row (torch reads the middle, Paddle's kernel row 0).

Registered into ``spmdrules.importers.aten.ATEN`` on import, as ``aten_sort`` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.engine.resampling import SIZE_ATTRS, out_lengths
from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten

_LAYOUT = {3: "NCW", 4: "NCHW", 5: "NCDHW"}


def _interp(c: Ctx, op: str, x: Tensor, scales: Sequence[float | None] | None,
            align_corners: bool) -> Tensor:
    nsp = x.ndim - 2
    ins, outs = list(x.shape[2:]), c.shape[2:]
    attrs: dict[str, Any] = {"data_format": _LAYOUT[x.ndim], "align_corners": align_corners,
                             "align_mode": 0}
    given = [None if s is None or float(s) <= 0 else float(s) for s in (scales or [None] * nsp)]
    if op == "bilinear_interp" and not align_corners and any(
            o == 1 < n for n, o in zip(ins, outs, strict=True)):
        raise c.fail(f"a half-pixel bilinear resize of {ins} to {outs}: torch reads an output "
                     "of length 1 at the input's middle, Paddle's kernel at row 0; resize to "
                     "more than one row or pass align_corners=True")
    if all(s is not None for s in given) and \
            list(out_lengths(op, ins, {"scale": given})) == list(outs):
        attrs["scale"] = given
    else:
        for n, o, s in zip(ins, outs, given, strict=True):
            if s is not None and o > 1 and not align_corners and \
                    np.float32(1.0 / s) != np.float32(n) / np.float32(o):
                raise c.fail(f"scale {s} with output length {o} over {n}: Paddle reads the "
                             "ratio from the scale only with the output int(in * scale); give "
                             "the output size alone or a scale that gives it")
        attrs.update(zip(SIZE_ATTRS[nsp], outs, strict=True))
    return c.call(op, x, **attrs)


@aten("upsample_nearest1d.vec", "upsample_nearest2d.vec", "upsample_nearest3d.vec")
def _nearest_vec(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _interp(c, "nearest_interp", a["input"], a["scale_factors"], False)


@aten("upsample_bilinear2d.vec")
def _bilinear_vec(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _interp(c, "bilinear_interp", a["input"], a["scale_factors"], bool(a["align_corners"]))


@aten("upsample_nearest1d.default")
def _nearest1d(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _interp(c, "nearest_interp", a["self"], [a["scales"]], False)


@aten("upsample_nearest2d.default")
def _nearest2d(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _interp(c, "nearest_interp", a["self"], [a["scales_h"], a["scales_w"]], False)


@aten("upsample_nearest3d.default")
def _nearest3d(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _interp(c, "nearest_interp", a["self"], [a["scales_d"], a["scales_h"], a["scales_w"]],
                   False)


@aten("upsample_bilinear2d.default")
def _bilinear2d(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _interp(c, "bilinear_interp", a["self"], [a["scales_h"], a["scales_w"]],
                   bool(a["align_corners"]))


__all__: list[str] = []
