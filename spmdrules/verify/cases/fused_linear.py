"""Cases of the fused linear layers: linear_v2 and fused_gemm_epilogue (with activations), and
fused_linear_param_grad_add; a probe contracts a size-1 dim split in every operand (with a bias)."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
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


@register_cases
def fused_linear(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1 if op == "linear_v2" else 2, 3))
    n = int(pick(rng, (1, 2, 3, 4, 6, 8)))
    probe = size_one_probe(rng)
    if op == "fused_linear_param_grad_add":
        return _param_grad_add(op, x, n, probe, rng)
    if probe:  # the contracted k of size 1, split in x and the weight
        x = (*x[:-1], 1)
    split: tuple[Split, ...] = ()
    if op == "linear_v2":
        bias = (n,) if probe or rng.random() < 0.7 else None
        if probe:
            split = (Split(0, len(x) - 1), Split(1, 0))
        return Draft(op, (x, (x[-1], n), bias), ("real", "real", None if bias is None else "real"),
                     {"transpose_weight": False}, split)
    tx, ty = bool(rng.random() < 0.4), bool(rng.random() < 0.4)
    xs = (*x[:-2], x[-1], x[-2]) if tx else x
    k = x[-1]
    ys = (n, k) if ty else (k, n)
    act = "none" if probe else pick(rng, ("none", "none", "relu", "gelu"))
    if probe:
        split = (Split(0, len(x) - (2 if tx else 1)), Split(1, 1 if ty else 0))
    return Draft(op, (xs, ys, (n,)), ("real", "real", "real"),
                 {"trans_x": tx, "trans_y": ty, "activation": act}, split)


def _param_grad_add(op: str, x: Shape, n: int, probe: bool, rng: Rng) -> Draft:
    """x^T @ dout summed over the rows (every leading dim); a probe makes one row dim 1, split."""
    x = (*x[:-1], max(x[-1], 1)) if len(x) >= 2 else (2, x[-1])
    row = int(rng.integers(len(x) - 1)) if probe else -1
    if probe:
        x = (*x[:row], 1, *x[row + 1:])
    has_bias = probe or bool(rng.random() < 0.6)
    dw = (x[-1], n) if rng.random() < 0.3 else None
    db = (n,) if has_bias and rng.random() < 0.3 else None
    return Draft(op, (x, (*x[:-1], n), dw, db),
                 ("real", "real", None if dw is None else "real", None if db is None else "real"),
                 {"multi_precision": False, "has_bias": has_bias},
                 (Split(0, row), Split(1, row)) if probe else ())
