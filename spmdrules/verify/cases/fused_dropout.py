"""Cases of fused_dropout_add: training and test, both modes, p from 0 to 1."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, pick, register_cases


@register_cases
def fused_dropout(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    attrs = {"p": float(pick(rng, (0.0, 0.3, 0.5, 1.0))), "is_test": bool(rng.random() < 0.3),
             "mode": pick(rng, ("upscale_in_train", "downgrade_in_infer")),
             "seed": int(rng.integers(0, 100)), "fix_seed": True}
    return Draft(op, (x, x), ("real", "real"), attrs)
