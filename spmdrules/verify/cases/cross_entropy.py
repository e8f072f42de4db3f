"""Cases of softmax cross entropy: hard and soft labels, ignore_index."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, negative_axis


def cross_entropy(op: str, rng: Rng) -> Draft:
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    nd = len(x)
    axis = nd - 1 if rng.random() < 0.6 else int(rng.integers(nd))
    classes = x[axis]
    soft = rng.random() < 0.3
    use_softmax = rng.random() < 0.8
    attrs: dict[str, Any] = {
        "soft_label": soft, "use_softmax": use_softmax, "numeric_stable_mode": True,
        "ignore_index": -100, "axis": negative_axis(rng, axis, nd),
    }
    if soft:
        label, ldom = x, "positive"
    else:
        label, ldom = (*x[:axis], 1, *x[axis + 1 :]), f"index:{classes}"
        if rng.random() < 0.3:
            attrs["ignore_index"] = int(rng.integers(classes))
    return Draft(op, (x, label), ("real" if use_softmax else "prob", ldom), attrs)
