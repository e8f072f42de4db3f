"""ATen's sorting ops onto the sort family (``rules/sort.py``): ``topk``, the router of a
mixture of experts (Mixtral, Qwen2-MoE).

Registered into ``spmdrules.importers.aten.ATEN`` on import, as the converters of that module;
``spmdrules.importers.torch`` imports both.
"""

from __future__ import annotations

from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten, axis


@aten("topk.default")
def _topk(c: Ctx, a: dict[str, Any]) -> tuple[Tensor, ...]:
    """Values and int64 indices of the k largest (or smallest) along ``dim``. The kernel breaks
    ties by position and returns the values in order, which torch's contract allows for
    ``sorted=False`` too (it leaves that order unspecified)."""
    x: Tensor = a["self"]
    op = c.call_op("topk", x, k=int(a["k"]), axis=axis(a["dim"], max(x.ndim, 1)),
                   largest=bool(a["largest"]), sorted=bool(a["sorted"]))
    return tuple(op.outputs)


__all__: list[str] = []
