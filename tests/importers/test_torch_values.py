"""Values the torch importer must carry exactly (issue 23): every comparison with NaN, infinities
and ties, and integer constants past float64's 53 bits. Each module is imported, completed
data parallel on 2 ranks, lowered and run in the simulated executor, and compared with torch's
own result by ``==`` (not allclose), dtype included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from torch_runs import Fn  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.adjoint import gradient_program  # noqa: E402
from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.simulated import run_simulated  # noqa: E402
from spmdrules.graph.exchange import dumps, loads  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

MESH = sr.ProcessMesh([0, 1], dim_names=["dp"])
INF, NAN = float("inf"), float("nan")


def imported_run(fn: Callable[..., Any], *args: Any) -> tuple[list[np.ndarray], Any]:
    """The outputs of ``fn`` imported and run on 2 simulated ranks (the first input split on
    its batch dim), and the import."""
    imp = torch_import.export(Fn(fn), args)
    plan.apply(imp.graph, MESH, {imp.inputs[0]: plan.DataParallel(dim="dp")})
    run = run_simulated(lower(complete(imp.graph)), imp.feeds(*args))
    return [run.fetch(name) for name in imp.outputs], imp


def same(got: np.ndarray, want: Any) -> bool:
    """Equal entries (NaN to NaN) and dtypes; the executors compute every float dtype in
    float64, so a float result is compared in torch's dtype."""
    want = want.detach().numpy()
    if want.dtype.kind == "f":
        return got.dtype.kind == "f" and np.array_equal(got.astype(want.dtype), want,
                                                        equal_nan=True)
    return got.dtype == want.dtype and np.array_equal(got, want)


# ---- comparisons -------------------------------------------------------------------------------
# ties, infinities of both signs and NaN on either side
X = torch.tensor([[NAN, 1.0, INF, -INF, 0.0, 2.0], [1.0, NAN, INF, -INF, -1.0, NAN]])
Y = torch.tensor([[NAN, 1.0, INF, INF, 0.0, 1.0], [NAN, 0.0, -INF, -INF, 1.0, 2.0]])
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}
OP_TYPES = {"lt": "less_than", "le": "less_equal", "gt": "greater_than", "ge": "greater_equal",
            "eq": "equal", "ne": "not_equal"}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_every_comparison_equals_torch_with_nan_inf_and_ties(name: str) -> None:
    cmp = COMPARISONS[name]
    for overload, scalar in (("Tensor", None), ("Scalar", 1.0), ("Scalar", INF), ("Scalar", NAN)):
        def fn(x: Any, y: Any, cmp: Any = cmp, scalar: Any = scalar) -> Any:
            return cmp(x, y if scalar is None else scalar)

        ep = torch.export.export(Fn(fn), (X, Y))
        assert f"aten.{name}.{overload}" in str(ep.graph), (name, overload)
        [got], imp = imported_run(fn, X, Y)
        assert same(got, fn(X, Y)), (name, scalar, got, fn(X, Y))
        types = {op.type for op in imp.graph.ops}
        assert OP_TYPES[name] in types and "logical_not" not in types, types


def test_where_on_a_comparison_zeroes_nan_as_torch_does_and_its_gradient_too() -> None:
    """The audit's case: ``where(x <= t, x, 0)`` keeps NaN only if ``<=`` is not(``>``)."""
    t = torch.tensor([[0.5, 1.0, 2.0, 3.0, NAN, 0.0], [1.0, 1.0, INF, -INF, 0.0, 0.0]])
    x = X.clone().requires_grad_(True)

    def fn(x: Any, t: Any) -> Any:
        return (torch.where(x <= t, x * 3.0, torch.zeros_like(x)),
                torch.where(x >= t, x * 5.0, torch.zeros_like(x)))

    outs, imp = imported_run(fn, X, t)
    for got, want in zip(outs, fn(X, t), strict=True):
        assert same(got, want), (got, want)
    # reverse mode: the mask routes the cotangent, as torch's autograd does
    seeds = [np.full(X.shape, 1.0, np.float32), np.full(X.shape, 10.0, np.float32)]
    gp = gradient_program(lower(complete(imp.graph)), imp.outputs)
    feeds = imp.feeds(X, t)
    for out, seed in zip(imp.outputs, seeds, strict=True):
        feeds[gp.seeds[out]] = seed
    run = run_simulated(gp, feeds)
    a, b = fn(x, t)
    torch.autograd.backward([a, b], [torch.from_numpy(s) for s in seeds])
    assert np.array_equal(run.fetch(gp.grads[imp.inputs[0]]), x.grad.numpy())


# ---- integer constants ---------------------------------------------------------------------------
BIG = 2**53 + 1  # the first int64 a float64 cannot hold
X_INT = torch.tensor([[1, 2], [3, 5]])
Z = torch.tensor([[2**60 + 1, -(2**61) - 3], [BIG, 7]])
INT_CASES: dict[str, Callable[[Any, Any], Any]] = {
    # the audit's three
    "x + (2**53+1)": lambda x, z: x + BIG,
    "full(2**62+1)": lambda x, z: x + torch.full((2, 2), 2**62 + 1),
    "x**27": lambda x, z: x**27,
    # every other way an int scalar reaches a constant
    "x - big": lambda x, z: x - BIG,
    "big - x (rsub)": lambda x, z: BIG - x,
    "x * big": lambda x, z: x * BIG,
    "add alpha": lambda x, z: torch.add(x, z, alpha=3),
    "z + 1": lambda x, z: z + 1 + x,
    "z // 3": lambda x, z: torch.div(z, 3, rounding_mode="floor") + x,
    "z == big": lambda x, z: (z == BIG) & (x > 0),
    "where with big": lambda x, z: torch.where(x > 2, z, BIG),
    "new_full": lambda x, z: x + x.new_full((2, 2), -(2**62) - 1),
    "full_like": lambda x, z: x + torch.full_like(x, 2**58 + 3),
    "arange": lambda x, z: x + torch.arange(2**60 + 1, 2**60 + 3),
    "arange step": lambda x, z: x + torch.arange(BIG, BIG + 6 * 3, 6)[:2],
    # torch wraps an int operand into the tensor's dtype: 2**40 + 3 adds 3 to an int32
    "int32 + (2**40+3)": lambda x, z: x.to(torch.int32) + (2**40 + 3),
}


@pytest.mark.parametrize("name", list(INT_CASES))
def test_int64_constants_are_exact(name: str) -> None:
    fn = INT_CASES[name]
    [got], _ = imported_run(fn, X_INT, Z)
    want = fn(X_INT, Z)
    assert same(got, want), (name, got, want.numpy(), got - want.numpy())


def test_true_division_of_integers_is_float_as_in_torch() -> None:
    """Ministral-3's ``positions / scale`` of int64 positions: the mapping divided in int64."""
    for fn in (lambda x, z: x / 2, lambda x, z: x / (x + 1), lambda x, z: torch.div(3, x + 1),
               lambda x, z: torch.div(x, 4, rounding_mode=None)):
        [got], _ = imported_run(fn, X_INT, Z)
        want = fn(X_INT, Z)
        assert want.dtype == torch.float32 and same(got, want), (got, want)


def test_an_int64_constant_survives_the_json_exchange() -> None:
    """``spmdrules import`` writes the graph as JSON: the attribute stays an exact int there."""
    imp = torch_import.export(Fn(lambda x: x + torch.arange(BIG, BIG + 2) * BIG), (X_INT,))
    g = loads(dumps(imp.graph))
    assert g == imp.graph
    attrs = [op.attr_dict for op in g.ops if op.type in ("full", "arange")]
    assert {"start": BIG, "end": BIG + 2} in [{k: a[k] for k in ("start", "end")} for a in attrs
                                              if "start" in a]
    assert any(a.get("value") == BIG and type(a["value"]) is int for a in attrs)
    got = run_serial(g, imp.feeds(X_INT))[imp.outputs[0]]
    want = (X_INT + torch.arange(BIG, BIG + 2) * BIG).numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want)


class Negations(torch.nn.Module):
    """cpmant's ``~mask`` of an int32 mask is ``logical_not`` of a number: bool, ``x == 0``;
    ``bitwise_not`` of one flips its bits; of a bool both are ``not``."""

    def forward(self, i: Any, b: Any) -> Any:
        return (torch.logical_not(i), torch.logical_not(i.float()), torch.bitwise_not(i),
                torch.logical_not(b), torch.bitwise_not(b))


def test_logical_not_of_a_number_is_bool_and_bitwise_not_flips_bits() -> None:
    i = torch.tensor([[0, 1, -3], [7, 0, 2]], dtype=torch.int32)
    b = torch.tensor([True, False])
    im = torch_import.export(Negations(), (i, b))
    got = run_serial(im.graph, im.feeds(i, b))
    for name, want in zip(im.outputs, Negations()(i, b), strict=True):
        assert got[name].dtype == want.numpy().dtype, name
        np.testing.assert_array_equal(got[name], want.numpy(), err_msg=name)


class Log1pExpm1(torch.nn.Module):
    """apertus' xIELU activation: ``log1p`` and ``expm1``, exact near 0 where ``log(1 + x)``
    and ``exp(x) - 1`` lose every digit."""

    def forward(self, x: Any) -> Any:
        return torch.log1p(x.abs()), torch.expm1(x)


def test_log1p_and_expm1_keep_their_digits_near_zero() -> None:
    x = torch.tensor([1e-10, -3e-9, 0.5, -2.0, 0.0], dtype=torch.float64)
    im = torch_import.export(Log1pExpm1(), (x,))
    assert {"log1p", "expm1"} <= {op.type for op in im.graph.ops}
    got = run_serial(im.graph, im.feeds(x))
    for name, want in zip(im.outputs, Log1pExpm1()(x), strict=True):
        np.testing.assert_allclose(got[name], want.numpy(), rtol=1e-12, atol=0, err_msg=name)
