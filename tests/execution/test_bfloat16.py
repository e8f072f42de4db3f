"""bfloat16 (ml_dtypes' dtype, numpy kind 'V') is a float everywhere (issue 23, item 20): every
reduction kernel, the replicas check with NaN, and the other kernels and reverse-mode code that
classified a dtype by numpy's kind letter."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.core.shards import ShardMismatch, gather
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import run_serial, serial_vjp
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
LINE = sr.ProcessMesh([0, 1, 2, 3], dim_names=["g"])

#: every reduction kernel: (op, attributes, whether its result is one of x's values)
REDUCTIONS: list[tuple[str, dict[str, Any], bool]] = [
    *[(op, {"axis": [1]}, op in ("max", "amax", "reduce_max", "min", "amin"))
      for op in ("sum", "reduce_sum", "squared_l2_norm", "max", "amax", "reduce_max", "min",
                 "amin", "prod", "frobenius_norm", "mean", "logsumexp")],
    *[("reduce_base", {"axis": [1], "reduce_type": rt}, rt in (1, 2)) for rt in range(5)],
    *[("p_norm", {"axis": 1, "porder": p}, p in (np.inf, -np.inf))
      for p in (2.0, 1.0, 0.0, np.inf, -np.inf)],
    ("mean_all", {}, False),
    ("argmax", {"axis": 1}, True),
    ("argmin", {"axis": 1}, True),
]


def _x() -> np.ndarray[Any, Any]:
    x = np.array([[1.5, -2.0, 0.25], [3.0, np.nan, -1.0], [-0.0, 0.0, -0.0], [7.0, 0.5, -7.0]])
    return x.astype(BF16)


def _reduced(op: str, attrs: dict[str, Any], dtype: str) -> Graph:
    """``op`` over dim 1 of a [4, 3] x whose dim 1 is cut over 4 processes: one holds none
    of it, so a max or min yields its identity there."""
    with Graph(op) as g:
        x = g.input("x", [4, 3], dtype)
        ops.call(op, x, name="out", **attrs)
    shard(x, LINE, (None, "g"))
    return g


@pytest.mark.parametrize(("op", "attrs", "exact"), REDUCTIONS,
                         ids=[f"{op}-{a}" for op, a, _ in REDUCTIONS])
def test_every_reduction_kernel_computes_bfloat16_as_float32_rounded(
        op: str, attrs: dict[str, Any], exact: bool) -> None:
    x = _x()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN row
        g = _reduced(op, attrs, "bfloat16")
        want = run_serial(_reduced(op, attrs, "float32"), {"x": x.astype(np.float32)})["out"]
        serial = run_serial(g, {"x": x})["out"]
        sharded = run_simulated(lower(complete(g)), {"x": x}).fetch("out")
    for got in (serial, sharded):
        if exact:  # a selection: x's own value (or index), NaN included
            assert np.array_equal(got.astype(np.float32), want, equal_nan=True), (got, want)
            assert got.dtype == (np.int64 if op.startswith("arg") else BF16)
        else:
            np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, equal_nan=True)
    assert np.isnan(sharded.astype(np.float32)).any() == np.isnan(want).any()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "complex64"])
def test_a_nan_in_a_replicated_tensor_is_the_same_on_every_copy(dtype: str) -> None:
    with Graph("copies") as g:
        x = g.input("x", [4, 3], dtype)
        ops.multiply(x, x, name="out")
    shard(x, LINE, (None, None))
    value = np.array([[1.0, np.nan, 2.0]] * 4).astype(BF16 if dtype == "bfloat16" else dtype)
    out = run_simulated(lower(complete(g)), {"x": value}).fetch("out")  # gathers every copy
    assert np.isnan(out.astype(np.complex128)).sum() == 4


def test_the_replicas_check_compares_bits_with_nan_matching_nan() -> None:
    attr = sr.DistAttr(sr.ProcessMesh([0, 1], dim_names=["r"]), [-1])
    nan = np.array([np.nan], dtype=np.float32)
    other_nan = nan.view(np.uint32) ^ np.uint32(1)  # another payload: still NaN
    assert np.isnan(other_nan.view(np.float32)).all()
    for dt in (BF16, np.dtype(np.float16), np.dtype(np.float32)):
        a = nan.astype(dt)
        gather({(0,): a, (1,): a.copy()}, [1], attr)
        with pytest.raises(ShardMismatch, match="replicas disagree"):
            gather({(0,): a, (1,): np.array([1.0], dtype=dt)}, [1], attr)
        with pytest.raises(ShardMismatch, match="replicas disagree"):  # -0.0 is not 0.0
            gather({(0,): np.array([0.0], dtype=dt), (1,): np.array([-0.0], dtype=dt)}, [1], attr)
    gather({(0,): nan, (1,): other_nan.view(np.float32)}, [1], attr)


def _unary(op: str, value: np.ndarray[Any, Any], **attrs: Any) -> np.ndarray[Any, Any]:
    with Graph(op) as g:
        x = g.input("x", list(value.shape), "bfloat16")
        ops.call(op, x, name="out", **attrs)
    out: np.ndarray[Any, Any] = run_serial(g, {"x": value})["out"]
    return out


def test_round_and_the_scalar_math_kernels_keep_bfloat16() -> None:
    x = np.array([1.25, -2.5, 0.375, 3.75], dtype=BF16)
    rounded = _unary("round", x)
    assert rounded.dtype == BF16 and rounded.astype(np.float32).tolist() == [1, -3, 0, 4]
    erf = _unary("erf", x)
    assert erf.dtype == BF16
    np.testing.assert_allclose(erf.astype(np.float32), [0.9229, -0.9996, 0.4039, 1.0], atol=1e-2)


def test_max_pooling_takes_bfloat16() -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4).astype(BF16)
    with Graph("pool") as g:
        t = g.input("x", [1, 1, 4, 4], "bfloat16")
        ops.pool2d(t, kernel_size=[2, 2], strides=[2, 2], pooling_type="max", name="out")
    out = run_serial(g, {"x": x})["out"]
    assert out.dtype == BF16 and out.astype(np.float32).ravel().tolist() == [5, 7, 13, 15]


def test_reverse_mode_differentiates_bfloat16_tensors() -> None:
    with Graph("bf16") as g:
        x = g.input("x", [4, 2], "bfloat16")
        c = ops.cast(x, "float32", name="c")
        ops.tanh(c, name="out")
    shard(x, LINE, ("g", None))
    gp = gradient_program(lower(complete(g)), ["out"])
    assert list(gp.grads) == ["x"]
    value = np.linspace(-1, 1, 8).reshape(4, 2).astype(BF16)
    grads = serial_vjp(g.op("c"), {"x": value, "c": value.astype(np.float32)},
                       {"c": np.ones((4, 2), np.float32)})
    assert grads["x"].dtype == BF16 and np.array_equal(grads["x"].astype(np.float32),
                                                       np.ones((4, 2)))


def test_the_single_op_check_compares_bfloat16_with_its_nans() -> None:
    """verify's and the conformance check's comparison of results took NaN as equal only for
    numpy's kinds 'f' and 'c': two equal bfloat16 results with a NaN were said to differ."""
    from spmdrules.execution.single_op import _differ, same_blocks

    a = np.array([[1.0, np.nan], [-0.5, np.inf]], dtype=BF16)
    assert same_blocks([a], [a.copy()]) and _differ(a, a.copy()) is None
    b = a.copy()
    b[0, 0] = 1.5
    assert not same_blocks([a], [b])
    assert _differ(b, a) == "max abs error 0.5 (values up to 1)"
    b[1, 1] = 7.0  # an infinity matches only itself, whatever the scale of the finite values
    assert "max abs error inf" in str(_differ(b, a))
