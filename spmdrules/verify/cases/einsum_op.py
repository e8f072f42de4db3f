"""Cases of einsum: random equations over shared letters."""

from __future__ import annotations

from spmdrules.verify.cases.case import SIZES, Draft, Rng, draw_rank, pick


def einsum(op: str, rng: Rng) -> Draft:
    """A random equation of one or two operands; sometimes a diagonal (``ii->i``)."""
    pool = "abcde"
    size = {ch: int(pick(rng, SIZES)) for ch in pool}
    terms = []
    for _ in range(draw_rank(rng, 1, 2)):
        term = "".join(rng.permutation(list(pool))[: draw_rank(rng, 1, 3)])
        if rng.random() < 0.1:
            term += term[0]  # a repeated letter: a diagonal
        terms.append(term)
    letters = sorted(set("".join(terms)))
    kept = [ch for ch in rng.permutation(letters) if rng.random() < 0.6]
    eq = ",".join(terms) + "->" + "".join(kept)
    shapes = [tuple(size[ch] for ch in t) for t in terms]
    return Draft(op, (shapes,), (("real",) * len(terms),), {"equation": eq})
