"""Cases of label_smooth: uniform prior (absent or 0-d) or a prior_dist that broadcasts."""

from __future__ import annotations

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, register_cases


@register_cases
def label_smooth(op: str, rng: Rng) -> Draft:
    label = draw_shape(rng, draw_rank(rng, 1, 3))
    u = rng.random()
    prior: tuple[int, ...] | None
    if u < 0.3:
        prior = None
    elif u < 0.4:
        prior = ()
    elif u < 0.7:
        prior = (1, label[-1])
    else:
        prior = tuple(n if rng.random() < 0.5 else 1 for n in label)
    eps = float(rng.choice([0.0, 0.1, 0.25]))
    return Draft(op, (label, prior), ("prob", None if prior is None else "prob"),
                 {"epsilon": eps})
