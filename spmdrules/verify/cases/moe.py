"""Cases of moe_combine: expert rows gathered by index, k weights per token."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, pick


def moe(op: str, rng: Rng) -> Draft:
    rows, hidden = int(pick(rng, (2, 3, 4, 6, 8))), int(pick(rng, (1, 2, 3, 5)))
    tokens, k = int(pick(rng, (1, 2, 3, 4, 5))), int(pick(rng, (1, 2, 3)))
    return Draft(op, ((rows, hidden), (tokens, k), (tokens, k)),
                 ("real", "real", f"index:{rows}"), {})
