"""one_hot(x, num_classes): x's ids as one-hot rows, a new last dim of num_classes.

Described as data: x's dims keep their shards and pass to the result; the class dim is new and
replicated. Pending sums are resharded first (one_hot of a piece of a sum is no piece of the
one_hot of the sum).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T


def describe_one_hot(x: tuple[int, ...], *, num_classes: int) -> Description:
    if num_classes < 1:
        raise RuleArgumentError(f"num_classes is {num_classes}; give at least 1 class")
    xl = letters(len(x))
    cls = letters(1, xl)
    return Description((xl,), (xl + cls,), whole=frozenset(cls))


register_described("one_hot", describe_one_hot, inputs=[T("x")], outputs=[T("out")],
                   attrs=[A("num_classes", "int", 1)],
                   doc="OneHotInferSpmd: x's dims pass to the result; the class dim replicated.")
