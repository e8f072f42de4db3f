"""Cases of the constants: full of a random shape, full_like of a random tensor, arange ranges."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, pick, register_cases

_DTYPES = ("float64", "float32", "int64", "int32", "bool")


@register_cases
def constant(op: str, rng: Rng) -> Draft:
    value = float(pick(rng, (0.0, 1.0, -2.5, 3.0)))
    if op == "full":
        shape = draw_shape(rng, draw_rank(rng, 0, 3))
        return Draft(op, (), (), {"shape": list(shape), "value": value,
                                   "dtype": str(pick(rng, _DTYPES))})
    if op == "full_like":
        x = draw_shape(rng, draw_rank(rng, 0, 3))
        return Draft(op, (x,), ("real",), {"value": value, "dtype": str(pick(rng, ("", *_DTYPES)))})
    start = int(rng.integers(-4, 4))
    step = int(pick(rng, (1, 2, 3, -1, -2)))
    end = start + step * int(rng.integers(0, 9))
    if rng.random() < 0.3:  # a float range
        return Draft(op, (), (), {"start": start + 0.5, "end": end + 0.25, "step": step * 0.75,
                                  "dtype": ""})
    return Draft(op, (), (), {"start": start, "end": end, "step": step,
                              "dtype": str(pick(rng, ("", "int64", "float64")))})
