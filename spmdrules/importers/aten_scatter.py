"""ATen's ``scatter`` (of a number or of a tensor's values) and ``scatter_add`` onto the scatter
family's ``put_along_axis`` (``rules/scatter.py``): ``out[..., index[p], ...] = value[p]`` along
``dim``, at the positions ``p`` of the index. Exaone-MoE's router scatters its top-k choices
into a mask.

torch writes only where the index reaches: the index may be smaller than self on the other dims,
and ``src`` larger than the index (torch reads the index's leading part of it), which a slice of
``src`` gives first; ``put_along_axis`` writes at the index's positions alike. Where two
positions of the index name the same element, torch leaves unspecified which ``src`` value an
assignment keeps (a number writes the same value either way); ``scatter_add`` adds them all.
``scatter`` with ``reduce=`` (other overloads, which torch deprecates for ``scatter_reduce``)
has no converter: the import reports it unmapped, naming the node and this family.

Registered into ``spmdrules.importers.aten.ATEN`` on import (``converters.load``).
"""

from __future__ import annotations

from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten, axis


@aten("scatter.value", "scatter.src", "scatter_add.default")
def _scatter(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = c.cast(a["self"], c.dtype)
    index: Tensor = a["index"]
    if x.ndim == 0 or index.ndim != x.ndim:
        raise c.fail(f"index of rank {index.ndim} for self of rank {x.ndim}: torch.scatter "
                     "takes an index of self's rank, at least 1")
    d = axis(int(a["dim"]), x.ndim)
    if "value" in a:  # a number, at every position of the index
        value = c.call("expand", c.const(a["value"], x.dtype, "value"), shape=list(index.shape),
                       part="values")
    else:
        value = c.cast(a["src"], x.dtype)
        cut = [k for k in range(x.ndim) if index.shape[k] < value.shape[k]]
        if cut:
            value = c.call("slice", value, axes=cut, starts=[0] * len(cut),
                           ends=[index.shape[k] for k in cut], part="covered")
    reduce = "add" if c.node.target.__name__.startswith("scatter_add") else "assign"
    return c.call("put_along_axis", x, c.cast(index, "int64"), value, axis=d, reduce=reduce,
                  include_self=True)


__all__: list[str] = []
