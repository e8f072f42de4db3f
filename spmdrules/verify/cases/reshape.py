"""Cases of the reshape family: reshape, flatten, squeeze and unsqueeze."""

from __future__ import annotations

import math
from typing import Any

from spmdrules.verify.cases.case import (
    Draft,
    NoCaseError,
    Rng,
    draw_rank,
    draw_shape,
    negative_axis,
    pick,
    register_cases,
)


# ---- shape ops ---------------------------------------------------------------------------------
def _factor(rng: Rng, n: int) -> list[int]:
    """A random factorisation of ``n`` into 1..4 factors (ones included sometimes)."""
    primes: list[int] = []
    rest, p = n, 2
    while rest > 1:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    k = draw_rank(rng, 1, 4)
    out = [1] * k
    for q in primes:
        out[int(rng.integers(k))] *= q
    return out


@register_cases
def reshape(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 0, 3))
    nd = len(x)
    attrs: dict[str, Any]
    if op in ("reshape", "reshape2"):
        tgt: list[int] = _factor(rng, math.prod(x))
        if rng.random() < 0.3:
            tgt[int(rng.integers(len(tgt)))] = -1
        elif rng.random() < 0.3:
            same = [i for i in range(min(len(tgt), nd)) if tgt[i] == x[i]]
            if same:
                tgt[int(pick(rng, same))] = 0  # Paddle's "copy x's dim"
        attrs = {"shape": tgt}
    elif op == "flatten":
        start = int(rng.integers(max(nd, 1)))
        stop = int(rng.integers(start, max(nd, 1)))
        attrs = {"start_axis": negative_axis(rng, start, nd), "stop_axis": negative_axis(rng, stop, nd)}
    elif op == "squeeze":
        x = tuple(1 if rng.random() < 0.35 else n for n in x)
        axes = [negative_axis(rng, int(a), nd) for a in rng.permutation(nd)[: int(rng.integers(nd + 1))]]
        attrs = {"axis": axes if rng.random() < 0.7 else []}
    elif op in ("unsqueeze", "unsqueeze2"):
        axes, rank = [], nd
        for _ in range(draw_rank(rng, 1, 2)):
            a = int(rng.integers(rank + 1))
            axes.append(negative_axis(rng, a, rank + 1) if rng.random() < 0.3 else a)
            rank += 1
        attrs = {"axis": axes}
    else:
        raise NoCaseError(f"{op}: no case generator in the reshape family")
    return Draft(op, (x,), ("real",), attrs)
