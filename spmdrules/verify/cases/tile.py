"""Cases of the tile family: repeats of every rank, broadcasts to larger shapes."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    SIZES,
    Draft,
    Rng,
    draw_rank,
    draw_shape,
    pick,
    register_cases,
)


def _target(rng: Rng, x: tuple[int, ...]) -> list[int]:
    """A shape x broadcasts to: x's sizes, its 1s grown, maybe leading dims."""
    lead = [int(pick(rng, SIZES)) for _ in range(draw_rank(rng, 0, 2))]
    return lead + [int(pick(rng, SIZES[1:])) if n == 1 else n for n in x]


@register_cases
def tile(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 0, 3))
    if op == "tile":
        reps = [int(pick(rng, (1, 1, 2, 3))) for _ in range(draw_rank(rng, 0, len(x) + 1))]
        return Draft(op, (x,), ("real",), {"repeat_times": reps})
    target = _target(rng, x)
    if op == "expand":
        keep = [-1 if i >= len(target) - len(x) and rng.random() < 0.3 else n
                for i, n in enumerate(target)]
        return Draft(op, (x,), ("real",), {"shape": keep})
    if rng.random() < 0.3:
        return Draft(op, (x, None), ("real", None), {"target_shape": target})
    return Draft(op, (x, tuple(target)), ("real", "real"), {"target_shape": target})
