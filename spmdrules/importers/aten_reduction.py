"""ATen's extreme-value reductions onto the reduction family (``rules/reduction.py``): ``amax``
and ``amin`` (``max`` / ``min`` over dims), ``max`` / ``min`` of every element, ``max.dim`` /
``min.dim`` (the values by ``max`` / ``min``, the indices by ``argmax`` / ``argmin``),
``argmax`` / ``argmin``, and ``linalg_vector_norm`` onto ``p_norm``. DeepSeek-V4's and
Exaone-MoE's routers read them.

torch and the kernels agree on what is ambiguous: both return the index of the *first* extreme
entry of a row, and a NaN is the extreme (its value and its first index), so the indices are
well-defined and compared exactly.

Registered into ``spmdrules.importers.aten.ATEN`` on import (``converters.load``).
"""

from __future__ import annotations

import operator
from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten, axis


def reads(c: Ctx, i: int) -> bool:
    """Whether the program reads result ``i`` of the node (a ``getitem`` of it)."""
    return any(u.target is operator.getitem and u.args[1] == i for u in c.node.users)


def _dims(x: Tensor, dim: Any) -> list[int]:
    """The reduced dims: every dim for none or an empty list (as torch's ``amax``)."""
    if dim is None or (isinstance(dim, list | tuple) and not dim):
        return list(range(x.ndim))
    return sorted({axis(int(d), x.ndim) for d in (dim if isinstance(dim, list | tuple) else [dim])})


def _extreme(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["self"]
    if x.ndim == 0:
        return x
    op = "max" if c.node.target.__name__.startswith(("amax", "max")) else "min"
    return c.call(op, x, axis=_dims(x, a.get("dim")), keep_dim=bool(a.get("keepdim", False)))


aten("amax.default", "amin.default", "max.default", "min.default")(_extreme)


@aten("max.dim", "min.dim")
def _extreme_with_index(c: Ctx, a: dict[str, Any]) -> tuple[Tensor | None, Tensor | None]:
    """(values, indices) along ``dim``; each result only if the program reads it."""
    x: Tensor = a["self"]
    keep = bool(a["keepdim"])
    if x.ndim == 0:  # torch takes dim 0 or -1 of a 0-d tensor: x itself, at index 0
        zero = c.const(0, "int64", "index") if reads(c, 1) else None
        return x, zero
    d = axis(int(a["dim"]), x.ndim)
    kind = "max" if c.node.target.__name__.startswith("max") else "min"
    values = c.call(kind, x, axis=[d], keep_dim=keep, part="values") if reads(c, 0) else None
    indices = (c.call(f"arg{kind}", x, axis=d, keepdims=keep, part="indices")
               if reads(c, 1) else None)
    return values, indices


@aten("argmax.default", "argmin.default")
def _arg(c: Ctx, a: dict[str, Any]) -> Tensor:
    """The int64 index of the first extreme entry along ``dim``, or of x flattened (no dim)."""
    x: Tensor = a["self"]
    keep = bool(a["keepdim"])
    op = "argmax" if c.node.target.__name__.startswith("argmax") else "argmin"
    if a["dim"] is None or x.ndim == 0:
        return c.call(op, x, axis=-1, keepdims=keep, flatten=True)
    return c.call(op, x, axis=axis(int(a["dim"]), x.ndim), keepdims=keep)


@aten("linalg_vector_norm.default")
def _vector_norm(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``torch.linalg.vector_norm`` (and ``x.norm(p, dim)``, which exports as it) onto
    ``p_norm``: over one dim, or over every dim (``asvector``)."""
    x: Tensor = c.cast(a["self"], c.dtype)
    dims = _dims(x, a["dim"])
    keep = bool(a["keepdim"])
    porder = float(a["ord"])
    if x.ndim == 0 or len(dims) == x.ndim:
        out = c.call("p_norm", x, porder=porder, axis=-1, keepdims=False, asvector=True,
                     part="norm" if keep else "")
        return c.call("reshape", out, shape=c.shape, part="kept") if keep else out
    if len(dims) > 1:
        raise c.fail(f"a norm over dims {dims} of a rank-{x.ndim} tensor: p_norm takes one dim "
                     "or every dim; reshape the dims into one first")
    return c.call("p_norm", x, porder=porder, axis=dims[0], keepdims=keep)


__all__: list[str] = []
