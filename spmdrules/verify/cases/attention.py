"""Cases of flash_attention: grouped-query heads, an additive mask broadcast over batch or heads,
causal masking (query length at most the key length, so no row loses every key)."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import Draft, Rng, pick, register_cases


@register_cases
def attention(op: str, rng: Rng) -> Draft:
    b = int(pick(rng, (1, 2, 3, 4)))
    hk = int(pick(rng, (1, 2, 2, 3, 4)))
    h = hk * int(pick(rng, (1, 1, 2, 3)))
    d, dv = int(pick(rng, (2, 3, 4))), int(pick(rng, (2, 3, 5)))
    skv = int(pick(rng, (1, 2, 3, 5, 6)))
    causal = rng.random() < 0.5
    sq = int(rng.integers(1, skv + 1)) if causal else int(pick(rng, (1, 2, 3, 4)))
    mask = None
    if rng.random() < 0.5:
        mask = (b if rng.random() < 0.7 else 1, h if rng.random() < 0.5 else 1, sq, skv)
    attrs: dict[str, Any] = {
        "dropout": 0.0 if rng.random() < 0.5 else 0.1, "causal": causal,
        "return_softmax": bool(rng.random() < 0.5), "is_test": True, "rng_name": "",
    }
    if attrs["dropout"] == 0.0:
        attrs["is_test"] = bool(rng.random() < 0.5)
    return Draft(op, ((b, sq, h, d), (b, skv, hk, d), (b, skv, hk, dv), None, mask),
                 ("real", "real", "real", None, None if mask is None else "real"), attrs)
