"""where(condition, x, y): ``condition ? x : y`` entrywise, with numpy's broadcasting.

Described as data: the three operands' dims take the result's letters, right-aligned, a ``'1'``
for a size-1 dim that broadcasts (it has no block to split). The result follows the condition and
x, as Paddle merges them (y's own shards are not asked for: it is resharded to match). Pending
sums are resharded first (a selection does not distribute over them). Operands whose shapes do
not broadcast raise a typed error naming the dim.
"""

from __future__ import annotations

from collections.abc import Hashable

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description
from spmdrules.engine.einsum import broadcast_notations
from spmdrules.engine.registry import T

Shape = tuple[int, ...]


def broadcast(named: dict[str, Shape]) -> Shape:
    """numpy's broadcast of the named shapes; a clash names both tensors and the dim."""
    ndim = max(len(s) for s in named.values())
    out, owner = [1] * ndim, [""] * ndim
    for name, s in named.items():
        for i, n in enumerate(s):
            j = ndim - len(s) + i
            if n not in (1, out[j]) and out[j] != 1:
                raise RuleArgumentError(
                    f"{name!r} dim {i} has size {n} but {owner[j]!r} has size {out[j]} at the same "
                    "(right-aligned) position; make them equal or 1 so they broadcast")
            if n != 1:
                out[j], owner[j] = n, name
    return tuple(out)


def broadcast_key(shapes: tuple[Shape, ...]) -> Hashable:
    """What the description depends on: which dims are 1 (a shape clash keys on the shapes, so
    that describe runs and names it)."""
    ndim = max(map(len, shapes))
    out = [1] * ndim
    for s in shapes:
        off = ndim - len(s)
        for i, n in enumerate(s):
            if n != 1:
                o = out[off + i]
                if o == 1:
                    out[off + i] = n
                elif o != n:
                    return shapes
    return tuple(tuple(n == 1 for n in s) for s in shapes)


def describe_where(condition: Shape, x: Shape, y: Shape) -> Description:
    out = broadcast({"condition": condition, "x": x, "y": y})
    (cn, xn, yn, _), on = broadcast_notations([condition, x, y, out])
    return Description((cn, xn, yn), (on,), merge=(0, 1))


register_described(
    "where", describe_where, inputs=[T("condition"), T("x"), T("y")], outputs=[T("out")],
    key=broadcast_key,  # type: ignore[arg-type]
    doc="WhereInferSpmd: condition and x merged, broadcast dims replicated; the result follows.")
