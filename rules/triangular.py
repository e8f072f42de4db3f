"""triu and tril_triu: the upper (or lower) triangle of the last two dims, the rest zeroed.

Described as data: the matrix dims (the last two) are whole, as Paddle keeps them; the batch dims
keep their shards. Pending sums are resharded first (Paddle's choice).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T


def describe_triangular(x: tuple[int, ...], **_: object) -> Description:
    if len(x) < 2:
        raise RuleArgumentError(f"'x' has rank {len(x)}; a triangle needs the last two dims of a "
                                "tensor of rank >= 2")
    xl = letters(len(x))
    return Description((xl,), (xl,), whole=frozenset(xl[-2:]), pending=None)


DIAGONAL = A("diagonal", "int", 0)
register_described("triu", describe_triangular, inputs=[T("x")], outputs=[T("out")],
                   attrs=[DIAGONAL], key=ranks, doc="TriuInferSpmd: the matrix dims replicated.")
register_described("tril_triu", describe_triangular, inputs=[T("x")], outputs=[T("out")],
                   attrs=[DIAGONAL, A("lower", "bool", False)], key=ranks,
                   doc="TrilTriuInferSpmd: the matrix dims replicated.")
