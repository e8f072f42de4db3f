"""pad and its gradient rule: x with constant borders, ``paddings`` = [before0, after0, ...].

Described as data: a padded dim (a non-zero border) is whole, the others keep their shards.
Pending sums are resharded first (the border is not a piece of a sum).
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T

Shape = tuple[int, ...]


def padded_shape(x: Shape, paddings: Sequence[int]) -> Shape:
    if len(paddings) != 2 * len(x):
        raise RuleArgumentError(f"paddings has {len(paddings)} entries for 'x' of rank {len(x)}; "
                                f"give a before and an after per dim ({2 * len(x)} entries)")
    for i, p in enumerate(paddings):
        if p < 0:
            raise RuleArgumentError(f"paddings[{i}] is {p} ('x' dim {i // 2}); a border is >= 0")
    return tuple(n + paddings[2 * d] + paddings[2 * d + 1] for d, n in enumerate(x))


def describe_pad(x: Shape, *grad: Shape, paddings: Sequence[int], **_: object) -> Description:
    padded_shape(x, paddings)
    xl = letters(len(x))
    whole = frozenset(ch for d, ch in enumerate(xl) if paddings[2 * d] or paddings[2 * d + 1])
    if grad:  # (x, out_grad) -> x_grad: the cotangent's inner box; x follows the cotangent
        return Description((xl, xl), (xl,), whole=whole, pending=None, merge=(1,))
    return Description((xl,), (xl,), whole=whole, pending=None)


ATTRS = [A("paddings", "ints", None), A("pad_value", "float", 0.0)]
register_described("pad", describe_pad, inputs=[T("x")], outputs=[T("out")], attrs=ATTRS,
                   doc="PadInferSpmd: padded dims replicated.")
register_described("pad_grad", describe_pad, inputs=[T("x"), T("out_grad")],
                   outputs=[T("x_grad")], attrs=ATTRS, reverse=False,
                   doc="PadGradInferSpmd: the cotangent's padded dims replicated; x_grad follows.")
