"""nonzero and unique: results whose sizes depend on the data.

Described as data: every dim of x and of the results is whole (which positions a rank's block
holds says nothing about where they land in the result), as Paddle answers. A graph op declares
the result's size with the op attribute ``size`` (an upper bound for nonzero, the number of unique
values for unique); the kernel fills the rows past the data's count and refuses data that does
not fit. Results unique does not return (``return_index`` and the like False) are 0-d.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T

SIZE = A("size", "int", -1)


def describe_nonzero(x: tuple[int, ...]) -> Description:
    xl = letters(len(x))
    out = letters(2, xl)
    return Description((xl,), (out,), whole=frozenset(xl + out), pending=None)


def describe_unique(x: tuple[int, ...], *, return_index: bool, return_inverse: bool,
                    return_counts: bool, axis: Sequence[int]) -> Description:
    xl = letters(len(x))
    free = iter(letters(len(xl) + 4, "")[len(xl):])
    out = next(free) if not axis else letters(len(x), xl + "".join(free))
    new = letters(3, xl + out)
    outs = (out, new[0] if return_index else "", new[1] if return_inverse else "",
            new[2] if return_counts else "")
    return Description((xl,), outs, whole=frozenset(xl + out + new), pending=None)


register_described("nonzero", describe_nonzero, inputs=[T("x")], outputs=[T("out")],
                   op_attrs=[SIZE],
                   doc="NonZeroInferSpmd: replicated. `size` declares the result's rows (an upper "
                   "bound on the nonzero count; rows past it are -1).")
register_described("unique", describe_unique, inputs=[T("x")],
                   outputs=[T("out"), T("indices"), T("inverse"), T("counts")], reverse=False,
                   attrs=[A("return_index", "bool", False), A("return_inverse", "bool", False),
                          A("return_counts", "bool", False), A("axis", "ints", ()),
                          A("dtype", "dtype", "int64")],
                   op_attrs=[SIZE],
                   doc="UniqueInferSpmd: replicated. `size` declares the number of unique values.")
