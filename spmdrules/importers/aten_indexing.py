"""ATen's selections onto the slice and gather families, and ``pow`` of two tensors onto the
elementwise family: ViT's CLS token and BERT's pooler (``select``), BERT's token type ids
(``gather``, ``index_select``), BLOOM's ALiBi slopes (``pow.Tensor_Tensor``, ``repeat`` onto
the tile family).

Registered into ``spmdrules.importers.aten.ATEN`` on import, as ``aten_sort``.
"""

from __future__ import annotations

from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten, axis


@aten("select.int")
def _select(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``x[..., i, ...]``: a one-element slice whose axis is dropped (``decrease_axis``)."""
    x: Tensor = a["self"]
    if x.ndim == 0:
        raise c.fail("select of a 0-d tensor: it has no dim to select from")
    d = axis(a["dim"], x.ndim)
    n, i = x.shape[d], int(a["index"])
    if not -n <= i < n:
        raise c.fail(f"index {i} is out of range for dim {d} of size {n}")
    i = i + n if i < 0 else i
    return c.call("slice", x, axes=[d], starts=[i], ends=[i + 1], decrease_axis=[d])


@aten("index_select.default")
def _index_select(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    index: Tensor = a["index"]
    if index.ndim == 0:  # torch takes a 0-d index as one element
        index = c.call("unsqueeze", index, axis=[0], part="index")
    return c.call("index_select", x, index, axis=axis(a["dim"], max(x.ndim, 1)))


@aten("gather.default")
def _gather(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``out[..., j, ...] = x[..., index[..., j, ...], ...]`` along ``dim``: take_along_axis.
    torch reads only the leading part of x that the index covers on the other dims (the index
    may be smaller there), which a slice of x gives first. ``sparse_grad`` only chooses how torch
    stores the gradient."""
    x: Tensor = a["self"]
    index: Tensor = a["index"]
    if x.ndim == 0 or index.ndim != x.ndim:
        raise c.fail(f"index of rank {index.ndim} for self of rank {x.ndim}: torch.gather "
                     "takes an index of self's rank, at least 1")
    d = axis(a["dim"], x.ndim)
    cut = [k for k in range(x.ndim) if k != d and index.shape[k] < x.shape[k]]
    if cut:
        x = c.call("slice", x, axes=cut, starts=[0] * len(cut),
                   ends=[index.shape[k] for k in cut], part="covered")
    return c.call("take_along_axis", x, c.cast(index, "int64"), axis=d)


@aten("repeat.default")
def _repeat(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``x.repeat(*repeats)``: tile (more repeats than dims prepend dims, as in torch)."""
    return c.call("tile", a["self"], repeat_times=[int(r) for r in a["repeats"]])


@aten("pow.Tensor_Tensor", "pow.Scalar")
def _pow(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``self ** exponent`` with either a tensor (``pow.Scalar``: a scalar base), in torch's
    promoted dtype."""
    base, exponent = a["self"], a["exponent"]
    dt = c.common(base, exponent)
    return c.call("elementwise_pow", c.operand(base, dt), c.operand(exponent, dt))


__all__: list[str] = []
