"""Cases of the matmul family: matmul with transposes and broadcast batch dims, bmm."""

from __future__ import annotations

from spmdrules.verify.cases.case import SIZES, Draft, Rng, Shape, draw_rank, draw_shape, pick


# ---- matrix products ---------------------------------------------------------------------------
def matmul(op: str, rng: Rng) -> Draft:
    m, k, n = (int(pick(rng, SIZES)) for _ in range(3))
    if op == "bmm":
        b = int(pick(rng, SIZES))
        return Draft(op, ((b, m, k), (b, k, n)), ("real", "real"), {})
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
    return Draft(op, (x, y), ("real", "real"), {"trans_x": tx, "trans_y": ty})
