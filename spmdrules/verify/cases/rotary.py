"""Cases of fused_rotary_position_embedding: k and v optional, sin and cos given ([1, s, 1, d] or
[s, d]) or computed, position ids into a longer table, time-major layouts, both rotation styles."""

from __future__ import annotations

from spmdrules.verify.cases.case import DomainArg, Draft, Rng, ShapeArg, pick, register_cases


@register_cases
def rotary(op: str, rng: Rng) -> Draft:
    b, s, h = (int(pick(rng, (1, 2, 3, 4, 5))) for _ in range(3))
    d = int(pick(rng, (2, 4, 6)))
    time_major = bool(rng.random() < 0.3)
    q = (s, b, h, d) if time_major else (b, s, h, d)
    k = q if rng.random() < 0.6 else None
    v = q if rng.random() < 0.4 else None
    ids = rng.random() < 0.3
    table: ShapeArg = None
    if rng.random() < 0.7:
        rows = s + int(rng.integers(0, 3)) if ids else s
        table = (1, rows, 1, d) if rng.random() < 0.7 else (rows, d)
    rows_avail = table[-3] if isinstance(table, tuple) and len(table) == 4 else (
        table[0] if isinstance(table, tuple) else s)
    shapes: tuple[ShapeArg, ...] = (q, k, v, table, table, (b, s) if ids else None)
    domains: tuple[DomainArg, ...] = (
        "real", None if k is None else "real", None if v is None else "real",
        None if table is None else "unit", None if table is None else "unit",
        f"index:{rows_avail}" if ids else None)
    return Draft(op, shapes, domains, {
        "use_neox_rotary_style": bool(rng.random() < 0.5), "time_major": time_major,
        "rotary_emb_base": float(pick(rng, (10000.0, 500.0)))})
