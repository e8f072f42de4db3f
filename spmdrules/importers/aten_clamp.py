"""ATen's ``clamp`` (bounds as numbers or tensors, either one absent) and ``clamp_min`` /
``clamp_max`` onto the elementwise family: ``minimum(maximum(x, lo), hi)``, torch's own
definition, in torch's promoted dtype. ERNIE-4.5-MoE's and DeepSeek-V4's routers clamp.

``maximum`` and ``minimum`` rather than ``clip``: their operands may be tensors, an integer
bound stays exact (``clip``'s bounds are float attributes), and their derivative is torch's for
``clamp``: the cotangent goes to x where ``lo <= x <= hi`` (ties included), to a tensor bound
where it wins. Past a bound that is NaN, both give NaN, as torch does.

Registered into ``spmdrules.importers.aten.ATEN`` on import (``converters.load``).
"""

from __future__ import annotations

from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten


@aten("clamp.default", "clamp.Tensor", "clamp_min.default", "clamp_min.Tensor",
      "clamp_max.default", "clamp_max.Tensor")
def _clamp(c: Ctx, a: dict[str, Any]) -> Tensor:
    name = c.node.target.__name__
    lo = a.get("min") if not name.startswith("clamp_max") else None
    hi = a.get("max") if not name.startswith("clamp_min") else None
    if lo is None and hi is None:
        raise c.fail("neither min nor max is given; torch.clamp needs at least one bound")
    dt = c.dtype
    out = c.cast(a["self"], dt)
    for bound, op, part in ((lo, "maximum", "min"), (hi, "minimum", "max")):
        if bound is not None:
            b = c.cast(bound, dt) if isinstance(bound, Tensor) else c.const(bound, dt, part)
            out = c.call(op, out, b, part=f"{part}.bound")
    return out


__all__: list[str] = []
