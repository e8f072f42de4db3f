"""The local kernels of the reductions (sum .. logsumexp, reduce_base, p_norm, mean_all,
argmax/argmin) (spmdrules/execution/kernels/reduction.py), proven by execution with the harness
in tests/support/kernel_harness.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from kernel_harness import (
    REDUCTIONS,
    RNG,
    Array,
    _normal,
    close,
    execute,
    layout,
    mesh,
    serial,
)

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import UnsupportedError
from spmdrules.execution.local import LocalContext, get_kernel


# ---- reductions -----------------------------------------------------------------------------------
def _red_ref(op: str, x: Array, axes: tuple[int, ...], keep: bool, attrs: dict[str, Any]) -> Array:
    ax = axes or tuple(range(x.ndim))
    moved = np.moveaxis(x, ax, tuple(range(len(ax))))
    rows = moved.reshape(-1, *moved.shape[len(ax) :]) if ax else moved[None]

    def fold(fn: Callable[[list[Any]], Any]) -> Array:
        flat = rows.reshape(rows.shape[0], -1)
        out = np.array([fn([v.item() for v in flat[:, j]]) for j in range(flat.shape[1])])
        out = out.reshape(rows.shape[1:])
        if keep:
            out = np.expand_dims(out, ax)
        return out

    what = {
        "sum": "sum",
        "reduce_sum": "sum",
        "amax": "max",
        "reduce_max": "max",
        "amin": "min",
    }.get(op, op)
    if op == "reduce_base":
        what = ("sum", "max", "min", "prod", "mean", "any", "all")[attrs["reduce_type"]]
    return {
        "sum": lambda: fold(math.fsum),
        "max": lambda: fold(max),
        "min": lambda: fold(min),
        "prod": lambda: fold(math.prod),
        "mean": lambda: fold(lambda v: math.fsum(v) / len(v)),
        "any": lambda: fold(any),
        "all": lambda: fold(all),
        "squared_l2_norm": lambda: fold(lambda v: math.fsum(e * e for e in v)),
        "frobenius_norm": lambda: fold(lambda v: math.sqrt(math.fsum(e * e for e in v))),
        "logsumexp": lambda: fold(
            lambda v: max(v) + math.log(math.fsum(math.exp(e - max(v)) for e in v))
        ),
    }[what]()


RED_LAYOUTS: list[tuple[tuple[int, ...], list[Any]]] = [
    ((2,), [0, -1, -1]),
    ((2, 2), [0, 1, -1]),
    ((4,), [-1, -1, 0]),  # dim 2 (size 3) on 4: an empty block
    ((2, 3), [1, -1, 0]),
    ((2, 2), [[0, 1], -1, -1]),
]


@pytest.mark.parametrize("op", [*REDUCTIONS, *(f"reduce_base:{t}" for t in range(7))])
def test_reductions(op: str) -> None:
    attrs: dict[str, Any] = {}
    if op.startswith("reduce_base"):
        op, t = op.split(":")
        attrs["reduce_type"] = int(t)
    boolean = op in ("all", "any") or attrs.get("reduce_type") in (5, 6)
    x = RNG.integers(0, 2, (4, 6, 3)) > 0 if boolean else _normal(4, 6, 3)
    if boolean:
        x[0] = True  # so that all() is true somewhere
    keep_name = "keepdims" if op == "logsumexp" else "keep_dim"
    for axes in ((), (0,), (1, -1), (2,)):
        for keep in (False, True):
            a = {**attrs, "axis": list(axes), keep_name: keep}
            want = _red_ref(op, x, tuple(sorted(d % 3 for d in axes)), keep, attrs)
            close(serial(op, [x], a, [want.shape])[0], want)
            for ms, mp in RED_LAYOUTS:
                m = mesh(*ms)
                xa = layout(m, mp)
                close(execute(op, [x], [xa], a, [want.shape])[0], want)


@pytest.mark.parametrize("porder", [0.0, 1.0, 2.0, 3.0, math.inf, -math.inf])
def test_p_norm(porder: float) -> None:
    x = _normal(4, 6, 3)
    x[0, 0, :] = 0.0
    for axis, asvector, keep in ((-1, False, False), (1, False, True), (0, True, False)):
        absx = np.abs(x)
        ax = None if asvector else axis
        if porder == 0:
            want = np.sum(absx != 0, axis=ax, keepdims=keep).astype(float)
        elif porder == math.inf:
            want = np.max(absx, axis=ax, keepdims=keep)
        elif porder == -math.inf:
            want = np.min(absx, axis=ax, keepdims=keep)
        else:
            want = np.sum(absx**porder, axis=ax, keepdims=keep) ** (1 / porder)
        if asvector and keep:
            want = want.reshape((1,) * x.ndim)
        attrs = {"porder": porder, "axis": axis, "keepdims": keep, "asvector": asvector}
        close(serial("p_norm", [x], attrs, [np.shape(want)])[0], want)
        for ms, mp in RED_LAYOUTS:
            m = mesh(*ms)
            xa = layout(m, mp)
            close(execute("p_norm", [x], [xa], attrs, [np.shape(want)])[0], want)


def test_mean_all_and_its_gradient() -> None:
    x = _normal(4, 6)
    want = np.asarray(math.fsum(x.ravel()) / x.size)
    close(serial("mean_all", [x], {}, [()])[0], want)
    for ms, mp in (((2, 2), [0, 1]), ((2, 3), [1, 0]), ((4,), [0, -1]), ((4,), [-1, 0])):
        m = mesh(*ms)
        close(execute("mean_all", [x], [DistAttr(m, mp)], {}, [()])[0], want)
    g = np.asarray(0.75)
    close(serial("mean_all_grad", [x, g], {}, [x.shape])[0], np.full(x.shape, 0.75 / x.size))
    m = mesh(2, 2)
    close(
        execute("mean_all_grad", [x, g], [DistAttr(m, [0, 1]), DistAttr(m, [])], {}, [x.shape])[0],
        np.full(x.shape, 0.75 / x.size),
    )


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions(op: str) -> None:
    x = RNG.integers(0, 4, (4, 5, 6)).astype(float)  # ties: the first index wins
    fn = np.argmax if op == "argmax" else np.argmin

    def first(v: list[float]) -> int:
        best = max(v) if op == "argmax" else min(v)
        return v.index(best)

    m = mesh(2, 2)
    for axis in (0, 1, -1):
        for keep in (False, True):
            want = np.apply_along_axis(lambda r: first(list(r)), axis, x)
            if keep:
                want = np.expand_dims(want, axis)
            attrs = {"axis": axis, "keepdims": keep, "flatten": False}
            got = serial(op, [x], attrs, [want.shape])[0]
            assert got.dtype == np.int64
            close(got, want)
            for mp in ([0, 1, -1], [1, -1, 0], [[0, 1], -1, -1]):
                xa = layout(m, mp)
                close(execute(op, [x], [xa], attrs, [want.shape])[0], want)
    for keep in (False, True):
        want = fn(x, keepdims=keep) if keep else np.asarray(fn(x))
        attrs = {"axis": 0, "keepdims": keep, "flatten": True}
        close(serial(op, [x], attrs, [want.shape])[0], want)
        close(execute(op, [x], [DistAttr(m, [0, 1, -1])], attrs, [want.shape])[0], want)


def test_arg_kernel_refuses_a_sharded_axis() -> None:
    m = mesh(2)
    x = _normal(4, 6)
    xa = DistAttr(m, [-1, 0])
    ctx = LocalContext(
        op="argmax",
        mesh=m,
        coord=(0,),
        input_shapes=(x.shape,),
        input_attrs=(xa,),
        output_shapes=((4,),),
        output_attrs=(DistAttr(m, [-1]),),
        attrs={"axis": 1, "keepdims": False, "flatten": False},
    )
    with pytest.raises(UnsupportedError, match="dim 1 is sharded"):
        get_kernel("argmax")(ctx, [x[:, :3]])

