"""ATen's ``constant_pad_nd`` (``F.pad`` in mode ``constant``) onto the pad family: ``pad`` with
Paddle's ``[x1_begin, x1_end, ...]`` where torch lists ``(last_begin, last_end, ...)`` from the
last dim backwards; a negative pad crops (a slice after it), as in torch. The linear-attention
layers of Qwen3.5, OLMo-hybrid and others pad their chunks so.

Registered into ``spmdrules.importers.aten.ATEN`` on import (``converters.load``).
"""

from __future__ import annotations

from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten, scalar


@aten("constant_pad_nd.default")
def _constant_pad(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    pad = [int(p) for p in a["pad"]]
    if len(pad) % 2 or len(pad) > 2 * x.ndim:
        raise c.fail(f"pad {pad} for a rank-{x.ndim} tensor: give pairs, at most one per dim")
    begin, end = [0] * x.ndim, [0] * x.ndim
    for k in range(len(pad) // 2):
        begin[x.ndim - 1 - k], end[x.ndim - 1 - k] = pad[2 * k], pad[2 * k + 1]
    y = x
    if any(p > 0 for p in begin + end):
        y = c.call("pad", x, paddings=[v for d in range(x.ndim)
                                       for v in (max(begin[d], 0), max(end[d], 0))],
                   pad_value=float(scalar(a["value"])), part="pad")
    crop = [d for d in range(x.ndim) if begin[d] < 0 or end[d] < 0]
    if crop:
        y = c.call("slice", y, axes=crop, starts=[-min(begin[d], 0) for d in crop],
                   ends=[y.shape[d] + min(end[d], 0) for d in crop], part="crop")
    return y


__all__: list[str] = []
