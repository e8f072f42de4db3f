"""Cases of the matmul family: matmul with transposes and broadcast batch dims, bmm; a probe
contracts a size-1 ``k`` split in both operands (bmm: also ``m`` or ``n``, which bmm_grad's
products contract)."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    SIZES,
    Draft,
    Rng,
    Shape,
    Split,
    draw_rank,
    draw_shape,
    pick,
    register_cases,
    size_one_probe,
)

#: per letter of bmm's ``bmk,bkn->bmn``: (argument, dim) of x, y and out that hold it
_BMM_DIMS = {"m": ((0, 1), (2, 1)), "k": ((0, 2), (1, 1)), "n": ((1, 2), (2, 2))}


# ---- matrix products ---------------------------------------------------------------------------
@register_cases
def matmul(op: str, rng: Rng) -> Draft:
    m, k, n = (int(pick(rng, SIZES)) for _ in range(3))
    probe = size_one_probe(rng)
    if op == "bmm":
        b = int(pick(rng, SIZES))
        if not probe:
            return Draft(op, ((b, m, k), (b, k, n)), ("real", "real"), {})
        letter = str(pick(rng, "kkmn"))
        m, k, n = (1 if letter == ch else s for ch, s in zip("mkn", (m, k, n), strict=True))
        return Draft(op, ((b, m, k), (b, k, n)), ("real", "real"), {},
                     tuple(Split(a, d) for a, d in _BMM_DIMS[letter]))
    k = 1 if probe else k
    xr, yr = draw_rank(rng, 1, 4), draw_rank(rng, 1, 4)
    batch = draw_shape(rng, max(xr, yr) - 2) if max(xr, yr) > 2 else ()
    tx = xr >= 2 and rng.random() < 0.3
    ty = yr >= 2 and rng.random() < 0.3

    def operand(rank: int, rows: int, cols: int, trans: bool) -> Shape:
        if rank == 1:
            return (cols,) if rows == m else (rows,)
        own = tuple(1 if rng.random() < 0.2 else s for s in batch[len(batch) - (rank - 2) :])
        return (*own, cols, rows) if trans else (*own, rows, cols)

    x = operand(xr, m, k, tx)
    y = (k,) if yr == 1 else operand(yr, k, n, ty)
    split: tuple[Split, ...] = ()
    if probe:  # k is x's last dim (second last transposed) and y's second last (last transposed)
        split = (Split(0, 0 if xr == 1 else xr - (2 if tx else 1)),
                 Split(1, 0 if yr == 1 else yr - (1 if ty else 2)))
    return Draft(op, (x, y), ("real", "real"), {"trans_x": tx, "trans_y": ty}, split)
