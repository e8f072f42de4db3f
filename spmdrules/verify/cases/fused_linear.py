"""Cases of the fused linear layers: linear_v2 and fused_gemm_epilogue (with activations)."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, pick


def fused_linear(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1 if op == "linear_v2" else 2, 3))
    n = int(pick(rng, (1, 2, 3, 4, 6, 8)))
    if op == "linear_v2":
        bias = (n,) if rng.random() < 0.7 else None
        return Draft(op, (x, (x[-1], n), bias), ("real", "real", None if bias is None else "real"),
                     {"transpose_weight": False})
    tx, ty = bool(rng.random() < 0.4), bool(rng.random() < 0.4)
    xs = (*x[:-2], x[-1], x[-2]) if tx else x
    k = x[-1]
    ys = (n, k) if ty else (k, n)
    act = pick(rng, ("none", "none", "relu", "gelu"))
    return Draft(op, (xs, ys, (n,)), ("real", "real", "real"),
                 {"trans_x": tx, "trans_y": ty, "activation": act})
