"""Shape and dtype inference of every op family against numpy's actual behaviour.

Each test runs the numpy version of the op on small random arrays and compares the shapes and
dtypes that the graph infers (through ``ops.<name>``, or the shape table directly for a name no
rule registers yet) with the arrays numpy returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import ops
from spmdrules.execution.executor import run_serial
from spmdrules.graph import shapes
from spmdrules.graph.errors import ShapeError
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor
from spmdrules.graph.shapes import TensorMeta

RNG = np.random.default_rng(0)
REGISTERED = set(sr.list_rules())


def arr(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) > 0.5
    if dtype.startswith("int"):
        return RNG.integers(1, 4, size=shape).astype(dtype)
    return (RNG.random(shape) * 0.8 + 0.1).astype(dtype)


def infer(op: str, *args: Any, **attrs: Any) -> list[Any]:
    """(shape, dtype) per flat result of ``op`` on numpy arrays (or lists of them)."""
    if op not in REGISTERED:
        metas: list[Any] = [
            tuple(TensorMeta(a.shape, str(a.dtype)) for a in x) if isinstance(x, list)
            else TensorMeta(x.shape, str(x.dtype)) for x in args
        ]
        outs = shapes.infer_meta(op, metas, attrs, node="t")
        flat = [m for o in outs for m in (o if not isinstance(o, TensorMeta) else (o,))]
        return [(m.shape, m.dtype) for m in flat]
    with Graph() as g:
        handles: list[Any] = []
        for i, x in enumerate(args):
            if isinstance(x, list):
                handles.append([g.input(f"a{i}_{j}", e.shape, str(e.dtype)) for j, e in enumerate(x)])
            else:
                handles.append(g.input(f"a{i}", x.shape, str(x.dtype)))
        op_node = ops.call(op, *handles, **attrs)
    return [(t.shape, t.dtype) for t in op_node.outputs]


def np_meta(*results: Any) -> list[Any]:
    flat: list[Any] = []
    for r in results:
        for a in (r if isinstance(r, list) else [r]):
            a = np.asarray(a)
            flat.append((tuple(a.shape), str(a.dtype)))
    return flat


def check(op: str, reference: Callable[..., Any], *args: Any, **attrs: Any) -> None:
    got = infer(op, *args, **attrs)
    res = reference(*args)
    want = np_meta(*(res if isinstance(res, tuple) else (res,)))
    assert got == want, f"{op}{attrs}: inferred {got}, numpy gives {want}"


def _erf(x: np.ndarray) -> np.ndarray:
    return np.tanh(x * np.float32(1.1283791))  # shape-exact stand-in (numpy has no erf)


def sig(x: np.ndarray) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(-x)))


UNARY_NUMPY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs, "acos": np.arccos, "acosh": lambda x: np.arccosh(x + 1), "asin": np.arcsin,
    "asinh": np.arcsinh, "assign": np.copy, "atan": np.arctan, "atanh": np.arctanh,
    "bernoulli": lambda x: (RNG.random(x.shape) < x).astype(x.dtype), "ceil": np.ceil,
    "celu": lambda x: np.maximum(x, 0) + np.minimum(0, np.expm1(x)),
    "clip": lambda x: np.clip(x, 0.2, 0.8), "conj": np.conj, "cos": np.cos, "cosh": np.cosh,
    "digamma": np.log, "dropout": lambda x: x * (RNG.random(x.shape) > 0.5).astype(x.dtype),
    "elementwise_unary": np.negative, "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "erf": _erf, "erfinv": np.arctanh, "exp": np.exp, "expm1": np.expm1,
    "fill": np.zeros_like, "floor": np.floor, "gelu": lambda x: x * sig(np.float32(1.702) * x),
    "hardshrink": lambda x: np.where(np.abs(x) > 0.5, x, 0).astype(x.dtype),
    "hardsigmoid": lambda x: np.clip(x / 6 + 0.5, 0, 1), "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "hardtanh": lambda x: np.clip(x, -1, 1), "leaky_relu": lambda x: np.where(x > 0, x, x * np.float32(0.01)),
    "lgamma": np.log, "log": np.log, "log10": np.log10, "log1p": np.log1p, "log2": np.log2,
    "logit": lambda x: np.log(x / (1 - x)), "logsigmoid": lambda x: np.log(sig(x)),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))), "poisson": lambda x: np.floor(x * 3),
    "pow": lambda x: np.power(x, np.float32(2)), "reciprocal": np.reciprocal,
    "relu": lambda x: np.maximum(x, 0), "relu6": lambda x: np.clip(x, 0, 6), "round": np.round,
    "rsqrt": lambda x: 1 / np.sqrt(x), "scale": lambda x: x * np.float32(0.125),
    "selu": lambda x: np.float32(1.05) * np.where(x > 0, x, np.expm1(x)), "sigmoid": sig,
    "sign": np.sign, "silu": lambda x: x * sig(x), "sin": np.sin, "sinh": np.sinh,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "softshrink": lambda x: np.sign(x) * np.maximum(np.abs(x) - 0.5, 0),
    "softsign": lambda x: x / (1 + np.abs(x)), "sqrt": np.sqrt, "square": np.square,
    "stanh": lambda x: np.float32(1.7159) * np.tanh(np.float32(0.67) * x),
    "swish": lambda x: x * sig(x), "tan": np.tan, "tanh": np.tanh,
    "tanh_shrink": lambda x: x - np.tanh(x),
    "thresholded_relu": lambda x: np.where(x > 1, x, 0).astype(x.dtype),
    "trunc": np.trunc,
}


def test_every_graph_op_has_shape_inference() -> None:
    missing = set(ops.names()) - set(shapes.SHAPE_RULES) - set(shapes.GENERIC_OPS)
    assert not missing, f"registered ops without shape inference: {sorted(missing)}"


def test_every_unary_op_has_a_numpy_reference() -> None:
    assert set(shapes.elementwise.UNARY_OPS) - {"bitwise_not"} == set(UNARY_NUMPY)


@pytest.mark.parametrize("op", sorted(UNARY_NUMPY))
@pytest.mark.parametrize("shape", [(3, 4, 5), (), (7,)])
def test_unary(op: str, shape: tuple[int, ...]) -> None:
    check(op, UNARY_NUMPY[op], arr(shape))


def test_unary_dtypes() -> None:
    check("logical_not", np.logical_not, arr((2, 3), "bool"))
    check("logical_not", np.logical_not, arr((2, 3), "float32"))
    check("bitwise_not", np.invert, arr((2, 3), "int32"))
    check("relu", lambda x: np.maximum(x, np.float16(0)), arr((2, 3), "float16"))


BINARY_NUMPY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "elementwise_add": np.add, "elementwise_binary": np.add,
    "subtract": np.subtract, "multiply": np.multiply, "elementwise_mul": np.multiply,
    "divide": np.true_divide, "elementwise_div": np.true_divide, "elementwise_pow": np.power,
    "floor_divide": np.floor_divide, "trunc_divide": lambda a, b: np.trunc(a / b),
    "fmax": np.fmax, "fmin": np.fmin, "maximum": np.maximum, "minimum": np.minimum,
    "remainder": np.remainder, "heaviside": np.heaviside,
    "greater_than": np.greater, "less_than": np.less, "not_equal": np.not_equal,
    "equal": np.equal, "greater_equal": np.greater_equal, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}
BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}
BROADCAST_CASES = [((3, 1, 5), (4, 5)), ((5,), (2, 3, 5)), ((), (2, 3)), ((2, 1), (1, 3)), ((4,), (4,))]


def test_every_binary_op_has_a_numpy_reference() -> None:
    table = set(shapes.elementwise.BINARY_OPS) | set(shapes.elementwise.PREDICATE_OPS)
    assert table == set(BINARY_NUMPY) | set(BITWISE)


@pytest.mark.parametrize("op", sorted(BINARY_NUMPY))
@pytest.mark.parametrize(("xs", "ys"), BROADCAST_CASES)
def test_binary_broadcasting(op: str, xs: tuple[int, ...], ys: tuple[int, ...]) -> None:
    check(op, BINARY_NUMPY[op], arr(xs), arr(ys))


@pytest.mark.parametrize("op", sorted(BITWISE))
def test_bitwise(op: str) -> None:
    check(op, BITWISE[op], arr((3, 1), "int32"), arr((4,), "int32"))
    check(op, BITWISE[op], arr((3,), "bool"), arr((3,), "bool"))


@pytest.mark.parametrize(("dx", "dy"), [("float16", "float32"), ("int32", "int64"),
                                        ("bool", "int32"), ("int32", "float32")])
def test_binary_promotes_like_numpy(dx: str, dy: str) -> None:
    check("add", np.add, arr((2, 3), dx), arr((2, 3), dy))
    check("multiply", np.multiply, arr((2, 3), dx), arr((3,), dy))


def test_bfloat16_promotion() -> None:
    assert shapes.promote(["bfloat16", "float16"]) == "float32"
    assert shapes.promote(["bfloat16", "int64"]) == "bfloat16"
    assert shapes.promote(["bfloat16", "float32"]) == "float32"


def test_broadcast_error_names_op_tensor_and_dim() -> None:
    with Graph() as g:
        x = g.input("x", [2, 3])
        y = g.input("y", [2, 4])
        with pytest.raises(ShapeError, match=r"op 'bad' \(add\): y: dim 1 has size 4 but x has size 3"):
            ops.add(x, y, name="bad")
    assert g.num_ops == 0


def test_a_constant_holds_its_int_exactly_or_refuses_one_its_dtype_cannot() -> None:
    big = 2**53 + 1  # a float64 holds only 53 bits of it
    with Graph() as g:
        full = ops.full(shape=[2], value=big, dtype="int64", name="big")
        assert full.producer is not None and full.producer.attr_dict["value"] == big
        x = g.input("x", [2], "int32")
        with pytest.raises(ShapeError, match=r"op 'wide' \(full\): value: 1099511627776 does "
                                             r"not fit int32; give a value in \[-2147483648, "):
            ops.full(shape=[2], value=2**40, dtype="int32", name="wide")
        with pytest.raises(ShapeError, match=r"value: nan does not fit int32"):
            ops.full_like(x, value=float("nan"), name="nan")
    got = run_serial(g, {"x": np.zeros(2, np.int32)})["big"]
    assert got.dtype == np.int64 and got.tolist() == [big, big]


def test_swiglu_and_add_n() -> None:
    check("swiglu", lambda x, y: x * sig(x) * y, arr((2, 6)), arr((2, 6)))

    def halves(x: np.ndarray) -> np.ndarray:
        a, b = np.split(x, 2, axis=-1)
        return np.asarray(a * sig(a) * b)

    check("swiglu", halves, arr((2, 3, 6)))
    check("add_n", lambda xs: sum(xs[1:], xs[0]), [arr((2, 3)), arr((2, 3)), arr((2, 3))])
    with pytest.raises(ShapeError, match="last dim"):
        infer("swiglu", arr((2, 5)))
    with pytest.raises(ShapeError, match=r"inputs\[1\]"):
        infer("add_n", [arr((2, 3)), arr((3, 2))])


# ---- matrix products ----------------------------------------------------------------------
def np_matmul(tx: bool, ty: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def f(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if tx and x.ndim > 1:
            x = np.swapaxes(x, -1, -2)
        if ty and y.ndim > 1:
            y = np.swapaxes(y, -1, -2)
        return np.asarray(np.matmul(x, y))

    return f


MATMUL_CASES = [
    ((3, 4), (4, 5), False, False), ((4,), (4, 5), False, False), ((3, 4), (4,), False, False),
    ((4,), (4,), False, False), ((2, 1, 3, 4), (5, 4, 6), False, False), ((4, 3), (4, 5), True, False),
    ((3, 4), (5, 4), False, True), ((2, 4, 3), (2, 5, 4), True, True), ((4,), (5, 4), True, True),
    ((7, 3, 4), (4,), False, False),
]


@pytest.mark.parametrize("op", ["matmul", "matmul_v2"])
@pytest.mark.parametrize(("xs", "ys", "tx", "ty"), MATMUL_CASES)
def test_matmul(op: str, xs: tuple[int, ...], ys: tuple[int, ...], tx: bool, ty: bool) -> None:
    check(op, np_matmul(tx, ty), arr(xs), arr(ys), trans_x=tx, trans_y=ty)


def test_matmul_errors() -> None:
    with pytest.raises(ShapeError, match="contracted dim has size 5 but x's has size 4"):
        infer("matmul", arr((3, 4)), arr((5, 6)))
    with pytest.raises(ShapeError, match="0-d"):
        infer("matmul", arr(()), arr((5, 6)))
    with pytest.raises(ShapeError, match="dim 0 has size 3 but x has size 2"):
        infer("matmul", arr((2, 3, 4)), arr((3, 4, 5)))


def test_bmm() -> None:
    check("bmm", np.matmul, arr((2, 3, 4)), arr((2, 4, 5)))
    with pytest.raises(ShapeError, match="batch"):
        infer("bmm", arr((2, 3, 4)), arr((3, 4, 5)))
    with pytest.raises(ShapeError, match="rank 2"):
        infer("bmm", arr((3, 4)), arr((4, 5)))


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]), ("ii->i", [(3, 3)]),
    ("ij->", [(2, 3)]), ("ij,jk", [(2, 3), (3, 4)]), ("ba", [(2, 3)]),
    ("...ij,...jk->...ik", [(5, 1, 2, 3), (4, 3, 6)]), ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]), ("...i->i...", [(2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 4, 5, 8), (2, 4, 6, 8)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
]


@pytest.mark.parametrize(("eq", "shps"), EINSUM_CASES)
def test_einsum(eq: str, shps: list[tuple[int, ...]]) -> None:
    check("einsum", lambda xs: np.einsum(eq, *xs), [arr(s) for s in shps], equation=eq)


def test_einsum_errors() -> None:
    with pytest.raises(ShapeError, match="letter 'j'"):
        infer("einsum", [arr((2, 3)), arr((4, 5))], equation="ij,jk->ik")
    with pytest.raises(ShapeError, match="2 operand terms"):
        infer("einsum", [arr((2, 3))], equation="ij,jk->ik")
    with pytest.raises(ShapeError, match="output letter 'z'"):
        infer("einsum", [arr((2, 3))], equation="ij->z")
    with pytest.raises(ShapeError, match=r"rank 3 but term 'ij'"):
        infer("einsum", [arr((2, 3, 4))], equation="ij->i")


# ---- reductions ---------------------------------------------------------------------------
def np_axis(axis: tuple[int, ...]) -> tuple[int, ...] | None:
    return axis if axis else None


REDUCE_NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum, "reduce_sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
    "amax": np.amax, "amin": np.amin, "reduce_max": np.max, "any": np.any, "all": np.all,
    "reduce_base": np.sum,
    "frobenius_norm": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    "squared_l2_norm": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
}
AXES = [(), (0,), (1, 2), (-1,), (0, -1)]


def test_every_reduction_has_a_numpy_reference() -> None:
    red = shapes.reduction
    table = set(red.REDUCE_SAME_OPS) | set(red.REDUCE_ACCUMULATE_OPS) | set(red.REDUCE_BOOL_OPS)
    assert table == set(REDUCE_NUMPY)


@pytest.mark.parametrize("op", sorted(REDUCE_NUMPY))
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keep", [False, True])
def test_reduction(op: str, axis: tuple[int, ...], keep: bool) -> None:
    f = REDUCE_NUMPY[op]
    check(op, lambda x: f(x, axis=np_axis(axis), keepdims=keep), arr((2, 3, 4)), axis=list(axis),
          keep_dim=keep)


@pytest.mark.parametrize("dtype", ["int32", "bool", "int64"])
@pytest.mark.parametrize("op", ["sum", "prod", "reduce_sum", "max", "any"])
def test_reduction_dtypes(op: str, dtype: str) -> None:
    f = REDUCE_NUMPY[op]
    check(op, lambda x: f(x, axis=(0,), keepdims=False), arr((2, 3), dtype), axis=[0], keep_dim=False)


def test_reduction_axis_errors() -> None:
    with pytest.raises(ShapeError, match="axis 3 is out of range for rank 3"):
        infer("sum", arr((2, 3, 4)), axis=[3], keep_dim=False)
    with pytest.raises(ShapeError, match="listed twice"):
        infer("sum", arr((2, 3, 4)), axis=[1, -2], keep_dim=False)


@pytest.mark.parametrize(("axis", "keep", "reduce_all"), [([1], False, False), ([0, 2], True, False),
                                                          ([1], False, True), ([], True, False)])
def test_logsumexp(axis: list[int], keep: bool, reduce_all: bool) -> None:
    # Paddle 3.3.1's op reads only axis (reduce_all does not widen it); [] reduces everything.
    ax = None if not axis else tuple(axis)
    check("logsumexp", lambda x: np.log(np.sum(np.exp(x), axis=ax, keepdims=keep)), arr((2, 3, 4)),
          axis=axis, keepdims=keep, reduce_all=reduce_all)


@pytest.mark.parametrize(("axis", "keep", "asvector"), [(-1, False, False), (0, True, False),
                                                        (1, False, True), (1, True, True)])
def test_p_norm(axis: int, keep: bool, asvector: bool) -> None:
    ax = None if asvector else axis
    check("p_norm", lambda x: np.sum(np.abs(x) ** 3, axis=ax, keepdims=keep) ** np.float32(1 / 3),
          arr((2, 3, 4)), porder=3.0, axis=axis, keepdims=keep, asvector=asvector)


def test_mean_all() -> None:
    check("mean_all", np.mean, arr((2, 3, 4)))
    check("mean_all", np.mean, arr(()))


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize(("axis", "keep", "flatten"), [(-1, False, False), (0, True, False),
                                                       (1, False, True), (1, True, True)])
def test_arg_reductions(op: str, axis: int, keep: bool, flatten: bool) -> None:
    f = np.argmax if op == "argmax" else np.argmin
    check(op, lambda x: f(x, axis=None if flatten else axis, keepdims=keep), arr((2, 3, 4)),
          axis=axis, keepdims=keep, flatten=flatten)


# ---- shape ops ----------------------------------------------------------------------------
def np_reshape(target: list[int]) -> Callable[[np.ndarray], np.ndarray]:
    def f(x: np.ndarray) -> np.ndarray:
        return x.reshape([x.shape[i] if n == 0 else n for i, n in enumerate(target)])

    return f


@pytest.mark.parametrize("op", ["reshape", "reshape2"])
@pytest.mark.parametrize("target", [[0, -1], [4, 0, 2], [-1], [2, 3, 2, 2], [0, 0, 2, 2], [24, 1]])
def test_reshape(op: str, target: list[int]) -> None:
    check(op, np_reshape(target), arr((2, 3, 4)), shape=target)


def test_reshape_errors() -> None:
    with pytest.raises(ShapeError, match=r"op 't' \(reshape\): shape: \[5, -1\] cannot hold"):
        shapes.infer_meta("reshape", [TensorMeta((2, 3, 4), "float32")], {"shape": (5, -1)}, node="t")
    with pytest.raises(ShapeError, match="both -1"):
        infer("reshape", arr((2, 3, 4)), shape=[-1, -1])
    with pytest.raises(ShapeError, match="holds 25 elements"):
        infer("reshape", arr((2, 3, 4)), shape=[5, 5])


@pytest.mark.parametrize(("start", "stop"), [(0, -1), (1, 2), (0, 0), (-2, -1), (1, 1)])
def test_flatten(start: int, stop: int) -> None:
    def f(x: np.ndarray) -> np.ndarray:
        s, e = start % x.ndim, stop % x.ndim
        return x.reshape((*x.shape[:s], -1, *x.shape[e + 1 :]))

    check("flatten", f, arr((2, 3, 4)), start_axis=start, stop_axis=stop)
    check("flatten", lambda x: x.reshape(1), arr(()), start_axis=0, stop_axis=-1)


@pytest.mark.parametrize("axis", [[], [0], [-2], [0, 2]])
def test_squeeze(axis: list[int]) -> None:
    check("squeeze", lambda x: np.squeeze(x, axis=tuple(axis) if axis else None), arr((1, 3, 1, 4)),
          axis=axis)


def test_squeeze_skips_non_unit_axes_like_paddle() -> None:
    # numpy raises on a listed axis of size 3; paddle.squeeze (and its SPMD rule) skips it
    assert infer("squeeze", arr((1, 3, 1)), axis=[0, 1]) == [((3, 1), "float32")]


@pytest.mark.parametrize("op", ["unsqueeze", "unsqueeze2"])
@pytest.mark.parametrize("axis", [[0], [-1], [0, 2], [1, 3], [3]])
def test_unsqueeze(op: str, axis: list[int]) -> None:
    check(op, lambda x: np.expand_dims(x, tuple(axis)), arr((2, 3, 4)), axis=axis)


def test_unsqueeze_inserts_one_after_another_like_paddle() -> None:
    # axis=[-1, -1]: each -1 is counted from the rank reached so far
    assert infer("unsqueeze", arr((2, 3)), axis=[-1, -1]) == [((2, 3, 1, 1), "float32")]
    assert infer("unsqueeze", arr((2, 3)), axis=[2, 0]) == [((1, 2, 3, 1), "float32")]


@pytest.mark.parametrize("op", ["transpose", "transpose2"])
@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [3, 2, 1, 0], [-1, 0, 1, 2], [0, 1, 2, 3]])
def test_transpose(op: str, perm: list[int]) -> None:
    check(op, lambda x: np.transpose(x, perm), arr((2, 3, 4, 5)), perm=perm)


def test_transpose_errors() -> None:
    with pytest.raises(ShapeError, match="not a permutation"):
        infer("transpose", arr((2, 3)), perm=[0, 0])
    with pytest.raises(ShapeError, match="does not list the 2 dims"):
        infer("transpose", arr((2, 3)), perm=[1, 0, 2])


# ---- concat / split / stack ---------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis: int) -> None:
    shp = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    xs = [arr(tuple(n + k if i == axis % 3 else n for i, n in enumerate(s))) for k, s in enumerate(shp)]
    check("concat", lambda a: np.concatenate(a, axis=axis), xs, axis=axis)


def test_concat_errors() -> None:
    with pytest.raises(ShapeError, match=r"x\[1\]: dim 0 has size 3 but x\[0\]'s has 2"):
        infer("concat", [arr((2, 4)), arr((3, 5))], axis=1)
    with pytest.raises(ShapeError, match="rank"):
        infer("concat", [arr((2, 4)), arr((2,))], axis=0)


@pytest.mark.parametrize(("sections", "axis"), [([2, -1, 3], 1), ([1, 1], 0), ([6], -1), ([0, 6], 1)])
def test_split(sections: list[int], axis: int) -> None:
    def f(x: np.ndarray) -> list[np.ndarray]:
        n = x.shape[axis]
        s = [n - sum(v for v in sections if v != -1) if v == -1 else v for v in sections]
        return list(np.split(x, np.cumsum(s)[:-1], axis=axis))

    check("split", f, arr((2, 6, 6)), sections=sections, axis=axis)


@pytest.mark.parametrize(("num", "axis"), [(3, -1), (2, 0), (1, 1)])
def test_split_with_num(num: int, axis: int) -> None:
    check("split_with_num", lambda x: list(np.split(x, num, axis=axis)), arr((2, 6, 6)), num=num,
          axis=axis)


def test_split_errors() -> None:
    with pytest.raises(ShapeError, match="sum to 5"):
        infer("split", arr((2, 6)), sections=[2, 3], axis=1)
    with pytest.raises(ShapeError, match="num=4"):
        infer("split_with_num", arr((2, 6)), num=4, axis=1)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unbind(axis: int) -> None:
    check("unbind", lambda x: [np.take(x, i, axis=axis) for i in range(x.shape[axis])], arr((2, 3, 4)),
          axis=axis)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis: int) -> None:
    check("stack", lambda xs: np.stack(xs, axis=axis), [arr((2, 3)) for _ in range(4)], axis=axis)
    with pytest.raises(ShapeError, match="stack tensors of one shape"):
        infer("stack", [arr((2, 3)), arr((3, 2))], axis=axis)


# ---- softmax, norms, embedding, cross entropy ---------------------------------------------
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(op: str, axis: int) -> None:
    def f(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        s = e / np.sum(e, axis=axis, keepdims=True)
        return np.asarray(s if op == "softmax" else np.log(s))

    check(op, f, arr((2, 3, 4)), axis=axis)


@pytest.mark.parametrize("bna", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm(bna: int, dtype: str) -> None:
    def f(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, ...]:
        axes = tuple(range(bna, x.ndim))
        mean = x.mean(axis=axes)
        var = x.var(axis=axes)
        shp = (*x.shape[:bna], *(1,) * (x.ndim - bna))
        out = (x - mean.reshape(shp)) / np.sqrt(var.reshape(shp) + 1e-5) * scale.reshape(x.shape[bna:])
        return out + bias.reshape(x.shape[bna:]), mean, var

    n = 12 if bna == 1 else 4
    check("layer_norm", f, arr((2, 3, 4), dtype), arr((n,), dtype), arr((n,), dtype), begin_norm_axis=bna)


def test_layer_norm_optional_params_and_errors() -> None:
    assert infer("layer_norm", arr((2, 3, 4)), begin_norm_axis=2) == [
        ((2, 3, 4), "float32"), ((2, 3), "float32"), ((2, 3), "float32")]
    assert infer("layer_norm", arr((2, 8), "float16"))[1] == ((2,), "float32")
    with pytest.raises(ShapeError, match=r"scale: has shape \[4\] but .* need \[12\]"):
        infer("layer_norm", arr((2, 3, 4)), arr((4,)), begin_norm_axis=1)
    with pytest.raises(ShapeError, match="begin_norm_axis 3"):
        infer("layer_norm", arr((2, 3, 4)), begin_norm_axis=3)


def test_fused_rms_norm() -> None:
    def f(x: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inv = 1 / np.sqrt(np.mean(x * x, axis=-1) + np.float32(1e-6))
        return x * inv[..., None] * scale, inv

    check("fused_rms_norm", f, arr((2, 3, 8)), arr((8,)))
    with pytest.raises(ShapeError, match="scale"):
        infer("fused_rms_norm", arr((2, 3, 8)), arr((3,)))


@pytest.mark.parametrize("op", ["embedding", "lookup_table_v2"])
@pytest.mark.parametrize(("ids", "wdtype"), [((2, 5), "float32"), ((7,), "float16"), ((), "float32")])
def test_embedding(op: str, ids: tuple[int, ...], wdtype: str) -> None:
    check(op, lambda i, w: w[i], arr(ids, "int64"), arr((10, 6), wdtype))


def test_embedding_errors() -> None:
    with pytest.raises(ShapeError, match="ids are integers"):
        infer("embedding", arr((2, 5)), arr((10, 6)))
    with pytest.raises(ShapeError, match="weight: has rank 3"):
        infer("embedding", arr((2, 5), "int64"), arr((10, 6, 2)))


def np_cross_entropy(axis: int, soft: bool) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, ...]]:
    def f(x: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        sm = e / np.sum(e, axis=axis, keepdims=True)
        if soft:
            loss = -np.sum(label * np.log(sm), axis=axis, keepdims=True)
        else:
            loss = -np.log(np.take_along_axis(sm, label, axis=axis))
        return sm, loss

    return f


@pytest.mark.parametrize("op", ["cross_entropy_with_softmax", "softmax_with_cross_entropy"])
@pytest.mark.parametrize(("xs", "axis", "soft"), [((2, 3, 5), -1, False), ((2, 5, 3), 1, False),
                                                  ((4, 5), -1, True), ((6,), 0, False)])
def test_cross_entropy(op: str, xs: tuple[int, ...], axis: int, soft: bool) -> None:
    x = arr(xs)
    if soft:
        label = arr(xs)
    else:
        ls = list(xs)
        ls[axis] = 1
        label = RNG.integers(0, xs[axis], size=ls).astype("int64")
    check(op, np_cross_entropy(axis, soft), x, label, soft_label=soft, axis=axis)


def test_cross_entropy_errors() -> None:
    with pytest.raises(ShapeError, match=r"label: has shape \[2, 3\] but hard labels need \[2, 3, 1\]"):
        infer("cross_entropy_with_softmax", arr((2, 3, 5)), arr((2, 3), "int64"))
    with pytest.raises(ShapeError, match="class ids"):
        infer("cross_entropy_with_softmax", arr((2, 3, 5)), arr((2, 3, 1)))


# ---- generic rules ------------------------------------------------------------------------
@pytest.mark.parametrize("op", [o for o in shapes.GENERIC_OPS if o in REGISTERED])
def test_generic_rules_take_declared_results(op: str) -> None:
    with Graph() as g:
        a = g.input("a", [4, 3])
        b = g.input("b", [4, 5], "int64")
        outs = ops.call(op, [a, b], outs=[([4, 8], "float16"), [4]])
    assert [(t.shape, t.dtype) for t in outs.outputs] == [((4, 8), "float16"), ((4,), "float32")]
    assert isinstance(outs.results[0], tuple) and all(isinstance(t, Tensor) for t in outs.results[0])
