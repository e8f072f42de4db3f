"""Cases of softmax cross entropy: hard and soft labels, ignore_index. A probe gives the class
axis (which the loss contracts) size 1, split in x (and a soft label)."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import (
    Draft,
    Rng,
    Shape,
    Split,
    draw_rank,
    draw_shape,
    negative_axis,
    register_cases,
    size_one_probe,
)


def _classes(rng: Rng) -> tuple[Shape, bool]:
    """x of rank 1 to 3 and whether its last dim, the classes, is a probe (size 1, split)."""
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    probe = size_one_probe(rng)
    return ((*x[:-1], 1) if probe else x), probe


@register_cases
def cross_entropy(op: str, rng: Rng) -> Draft:
    if op == "c_softmax_with_cross_entropy":
        return c_softmax_cross_entropy(op, rng)
    if op == "c_softmax_with_multi_label_cross_entropy":
        return c_softmax_multi_label_cross_entropy(op, rng)
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    nd = len(x)
    axis = nd - 1 if rng.random() < 0.6 else int(rng.integers(nd))
    probe = size_one_probe(rng)
    if probe:
        x = (*x[:axis], 1, *x[axis + 1:])
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
    split = (Split(0, axis), *((Split(1, axis),) if soft else ())) if probe else ()
    return Draft(op, (x, label), ("real" if use_softmax else "prob", ldom), attrs, split)


def c_softmax_cross_entropy(op: str, rng: Rng) -> Draft:
    x, probe = _classes(rng)
    label = (*x[:-1], 1)
    ignore = int(rng.integers(x[-1])) if rng.random() < 0.3 else -100
    return Draft(op, (x, label), ("real", f"index:{x[-1]}"),
                 {"ignore_index": ignore, "rank": 0, "nranks": 1},
                 (Split(0, len(x) - 1),) if probe else ())


def c_softmax_multi_label_cross_entropy(op: str, rng: Rng) -> Draft:
    x, probe = _classes(rng)
    label = (*x[:-1], int(rng.integers(1, 5)))
    ignore = int(rng.integers(x[-1])) if rng.random() < 0.3 else -100
    return Draft(op, (x, label, label), ("real", f"index:{x[-1]}", "positive"),
                 {"ignore_index": ignore, "sum_multi_label_loss": bool(rng.random() < 0.5),
                  "rank": 0, "nranks": 1}, (Split(0, len(x) - 1),) if probe else ())
