"""cast(x, dtype): x's values in another dtype. Paddle 3.3.1 registers no rule for it.

Described as data: every dim keeps its shard. A pending sum is resharded first: casting does not
commute with addition in general (a sum of truncated values is not the truncated sum).
"""

from __future__ import annotations

from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T


def describe_cast(x: tuple[int, ...], **_: object) -> Description:
    xl = letters(len(x))
    return Description((xl,), (xl,))


register_described("cast", describe_cast, inputs=[T("x")], outputs=[T("out")],
                   attrs=[A("dtype", "dtype", "float32")], key=ranks,
                   doc="x in `dtype`: every dim keeps its shard; pending sums are resolved first.")
