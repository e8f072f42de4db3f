"""Cases of einsum: random equations over shared letters; a probe gives one letter (a contracted
one where there is one) size 1, split in every tensor that holds it."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    SIZES,
    Draft,
    Rng,
    Split,
    draw_rank,
    pick,
    register_cases,
    size_one_probe,
)


@register_cases
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
    split: tuple[Split, ...] = ()
    plain = [ch for ch in letters if all(t.count(ch) < 2 for t in terms)]  # no diagonal
    if plain and size_one_probe(rng):
        # a contracted letter is the forward's probe, a kept one einsum_grad's (an operand's
        # gradient contracts the letters it lacks)
        ch = str(pick(rng, [c for c in plain if c not in kept] or plain))
        size[ch] = 1
        split = tuple(Split(0, t.index(ch), item=i) for i, t in enumerate(terms) if ch in t)
        split += (Split(1, kept.index(ch)),) if ch in kept else ()
    shapes = [tuple(size[ch] for ch in t) for t in terms]
    return Draft(op, (shapes,), (("real",) * len(terms),), {"equation": eq}, split)
