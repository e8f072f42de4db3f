"""Cases of triu and tril_triu: batches of matrices, diagonals inside and outside the matrix."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


@register_cases
def triangular(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 2, 4))
    attrs: dict[str, object] = {"diagonal": int(rng.integers(-x[-2] - 1, x[-1] + 2))}
    if op == "tril_triu":
        attrs["lower"] = bool(rng.integers(2))
    return Draft(op, (x,), ("real",), attrs)
