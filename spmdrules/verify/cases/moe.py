"""Cases of moe_combine: expert rows gathered by index, k weights per token. A probe gives one
contracted letter size 1, split in every tensor that holds it: x's rows or ``k`` (the forward's),
the tokens or the hidden dim (the gradient's)."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, Split, pick, register_cases, size_one_probe

#: per letter of ``rh,sk,sk->sh``: (argument, dim) of x, combine_weights, scatter_index and y
_DIMS = {"r": ((0, 0),), "h": ((0, 1), (3, 1)), "s": ((1, 0), (2, 0), (3, 0)),
         "k": ((1, 1), (2, 1))}


@register_cases
def moe(op: str, rng: Rng) -> Draft:
    rows, hidden = int(pick(rng, (2, 3, 4, 6, 8))), int(pick(rng, (1, 2, 3, 5)))
    tokens, k = int(pick(rng, (1, 2, 3, 4, 5))), int(pick(rng, (1, 2, 3)))
    letter = str(pick(rng, "rkkhs")) if size_one_probe(rng) else ""
    rows, hidden, tokens, k = (1 if letter == ch else n
                               for ch, n in zip("rhsk", (rows, hidden, tokens, k), strict=True))
    return Draft(op, ((rows, hidden), (tokens, k), (tokens, k)),
                 ("real", "real", f"index:{rows}"), {},
                 tuple(Split(a, d) for a, d in _DIMS.get(letter, ())))
