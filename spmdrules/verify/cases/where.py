"""Cases of where: a bool condition and two operands that broadcast, of any ranks."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


def _operand(rng: Rng, out: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``out``: a suffix of it, some dims shrunk to 1."""
    k = draw_rank(rng, 0, len(out))
    return tuple(1 if rng.random() < 0.3 else n for n in out[len(out) - k:])


@register_cases
def where(op: str, rng: Rng) -> Draft:
    out = draw_shape(rng, draw_rank(rng, 0, 3))
    shapes = [out, _operand(rng, out), _operand(rng, out)]
    order = [int(i) for i in rng.permutation(3)]  # any operand may carry the full shape
    c, x, y = (shapes[i] for i in order)
    return Draft(op, (c, x, y), ("bool", "real", "real"), {})
