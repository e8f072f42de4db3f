"""Cases of the gather family: positions in range along any axis (negative too), 0-d to 2-d
indices, gather_nd over 1 to rank(x) dims. A probe gives gather, index_select and
take_along_axis one position along the axis, split in the index and the result: their gradients
scatter the positions back, a sum over them."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    SIZES,
    Draft,
    Rng,
    Split,
    draw_rank,
    draw_shape,
    negative_axis,
    pick,
    register_cases,
    size_one_probe,
)


@register_cases
def gather(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    if op == "gather_nd":
        k = draw_rank(rng, 1, len(x))
        index = (*draw_shape(rng, draw_rank(rng, 0, 2)), k)
        return Draft(op, (x, index), ("real", f"index:{min(x[:k])}"), {})
    ax = int(rng.integers(len(x)))
    axis = negative_axis(rng, ax, len(x))
    if op == "take_along_axis":
        index = tuple(int(pick(rng, SIZES)) if d == ax else
                      (n if rng.random() < 0.8 else int(rng.integers(1, n + 1)))
                      for d, n in enumerate(x))
    else:
        index = draw_shape(rng, 0 if op == "gather" and rng.random() < 0.2 else 1)
    split: tuple[Split, ...] = ()
    if index and size_one_probe(rng):
        at = ax if op == "take_along_axis" else 0
        index = (*index[:at], 1, *index[at + 1:])
        split = (Split(1, at), Split(2, ax))  # the index, and the result's positions
    return Draft(op, (x, index), ("real", f"index:{x[ax]}"), {"axis": axis}, split)
