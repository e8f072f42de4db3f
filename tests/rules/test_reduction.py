"""Reduction rules: hand-written cases, Paddle's quirks, typed errors, and execution proofs of the
deviation classes in docs/deviations/reduction.md."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.conformance.deviation import classify
from spmdrules.core.errors import RuleArgumentError, SpmdError
from spmdrules.core.shards import ShardMismatch, gather, run_local, scatter

Array = np.ndarray[Any, Any]
Kernel = Callable[[Array], Array]

MESH4 = ProcessMesh.from_shape([4], list(range(4)))
MESH22 = ProcessMesh.from_shape([2, 2], list(range(4)))
MESH42 = ProcessMesh.from_shape([4, 2], list(range(8)))
MESH24 = ProcessMesh.from_shape([2, 4], list(range(8)))


def spec(mesh: ProcessMesh, shape: Sequence[int], dm: Sequence[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(list(shape), DistAttr(mesh, list(dm), partial))


def da(mesh: ProcessMesh, dm: Sequence[int], partial: Any = None) -> DistAttr:
    return DistAttr(mesh, list(dm), partial)


def maps(info: SpmdInfo) -> tuple[list[str], list[str]]:
    return (
        [a.mapping_str() for a in info.inputs if isinstance(a, DistAttr)],
        [a.mapping_str() for a in info.outputs if isinstance(a, DistAttr)],
    )


def fwd(op: str, *args: Any, **kw: Any) -> tuple[list[str], list[str]]:
    return maps(get_rule(op).infer_forward(*args, **kw))


def rev(op: str, *args: Any, **kw: Any) -> tuple[list[str], list[str]]:
    return maps(get_rule(op).infer_reverse(*args, **kw))


# ---- forward: the notation and the reduce type per op ---------------------------------------------
def test_sum_keeps_kept_dims_and_leaves_a_sum_partial_without_divisibility_check() -> None:
    # Quirk 7: sum x[7,5]dm[0,1] axis=[1] -> out [0] P{1}; no divisibility check.
    assert fwd("sum", spec(MESH22, [7, 5], [0, 1]), [1], False) == (["[0,1]"], ["[0] P{1:sum}"])


@pytest.mark.parametrize(
    ("op", "rt"),
    [("max", "max"), ("amax", "max"), ("reduce_max", "max"), ("min", "min"), ("amin", "min"),
     ("prod", "product"), ("all", "all"), ("any", "any"), ("sum", "sum"), ("reduce_sum", "sum"),
     ("squared_l2_norm", "sum")],
)
def test_each_op_leaves_its_own_reduce_type(op: str, rt: str) -> None:
    # max/forward/0: x[10,10]dm[0,-1] axis=[0,1] on mesh [4]; Paddle says P{0:sum} for every op.
    assert fwd(op, spec(MESH4, [10, 10], [0, -1]), [0, 1], False) == (["[0,-1]"], [f"[] P{{0:{rt}}}"])


def test_empty_axis_reduces_all_and_negative_axes_count_from_the_end() -> None:
    x = spec(MESH22, [8, 6, 4], [0, -1, 1])
    assert fwd("max", x, [], False) == (["[0,-1,1]"], ["[] P{0:max,1:max}"])
    assert fwd("max", x, [-1], True) == (["[0,-1,1]"], ["[0,-1,-1] P{1:max}"])
    assert fwd("max", x, [-3, 1], False) == (["[0,-1,1]"], ["[1] P{0:max}"])


def test_partial_input_is_resharded_to_replicated_first() -> None:
    # Quirk 11: min/forward/0 -- x P{0} is dropped; the reduced dim's mesh dim 2 becomes partial.
    mesh = ProcessMesh.from_shape([2, 2, 2], list(range(8)))
    x = spec(mesh, [2, 2], [1, 2], {0: "sum"})
    assert fwd("min", x, [1], True) == (["[1,2]"], ["[1,-1] P{2:min}"])


def test_co_sharded_reduced_dim_leaves_a_partial_on_each_mesh_dim() -> None:
    x = TensorSpec([8, 4], DistAttr(MESH22, multi_dims_mapping=[[0, 1], []]))
    assert fwd("sum", x, [0], False) == (["[[0,1],-1]"], ["[-1] P{0:sum,1:sum}"])


@pytest.mark.parametrize(
    ("code", "rt"), [(0, "sum"), (1, "max"), (2, "min"), (3, "product"), (4, "avg"), (5, "any"),
                     (6, "all")],
)
def test_reduce_base_reduce_type_enum(code: int, rt: str) -> None:
    # reduce_base/forward/0: reduce_type 2 -> min on both mesh dims.
    assert fwd("reduce_base", spec(MESH22, [6, 4], [1, 0]), [0, 1], False, code) == (
        ["[1,0]"], [f"[] P{{0:{rt},1:{rt}}}"])


def test_p_norm_partial_follows_porder() -> None:
    x = spec(MESH24, [32, 24], [-1, 0])
    assert fwd("p_norm", x, 0.0, 1, 1e-12, False, True) == (["[-1,0]"], ["[] P{0:sum}"])
    assert fwd("p_norm", x, 1.0, 1, 1e-12, False, False) == (["[-1,0]"], ["[-1] P{0:sum}"])
    assert fwd("p_norm", x, float("inf"), 1, 1e-12, False, False) == (["[-1,0]"], ["[-1] P{0:max}"])
    assert fwd("p_norm", x, float("-inf"), 1, 1e-12, True, False) == (
        ["[-1,0]"], ["[-1,-1] P{0:min}"])
    assert fwd("p_norm", x, 2.0, 1, 1e-12, False, False) == (["[-1,-1]"], ["[-1]"])
    # the kept dim stays sharded; only the reduced one is replicated
    assert fwd("p_norm", spec(MESH24, [32, 24], [1, 0]), 3.0, -1, 1e-12, False, False) == (
        ["[1,-1]"], ["[1]"])


def test_norms_and_logsumexp_replicate_sharded_reduced_dims() -> None:
    x = spec(MESH22, [16, 8], [0, 1])
    assert fwd("frobenius_norm", x, [1], False) == (["[0,-1]"], ["[0]"])
    assert fwd("logsumexp", x, [0], True, False) == (["[-1,1]"], ["[-1,1]"])
    # an unsharded reduced dim changes nothing
    assert fwd("logsumexp", spec(MESH22, [16, 8], [0, -1]), [1], False, False) == (
        ["[0,-1]"], ["[0]"])


def test_mean_all_avg_partial_only_over_evenly_divided_dims() -> None:
    # mean_all/forward/2: x[8,16]dm[0,-1] on mesh [2] -> P{0:avg}
    mesh2 = ProcessMesh.from_shape([2], [0, 1])
    assert fwd("mean_all", spec(mesh2, [8, 16], [0, -1])) == (["[0,-1]"], ["[] P{0:avg}"])
    # mean_all/forward/1: dim 0 (size 2) on mesh dim 0 (size 4) is uneven: replicated
    assert fwd("mean_all", spec(MESH42, [2, 2, 7], [0, 1, -1])) == (["[-1,1,-1]"], ["[] P{1:avg}"])


def test_mean_all_grad_replicates_x_and_cleans_out_grad() -> None:
    x = spec(MESH22, [8, 4], [0, 1], {})
    og = TensorSpec([], DistAttr(MESH22, [], {0: "sum"}))
    assert maps(get_rule("mean_all_grad").infer_forward(x, og)) == (
        ["[-1,-1]", "[]"], ["[-1,-1]"])


def test_argmax_replicates_the_axis_and_flatten_replicates_all() -> None:
    x = spec(MESH22, [16, 8, 4], [0, 1, -1])
    assert fwd("argmax", x, 1, False, False) == (["[0,-1,-1]"], ["[0,-1]"])
    assert fwd("argmin", x, -3, True, False) == (["[-1,1,-1]"], ["[-1,1,-1]"])
    assert fwd("argmax", x, 0, False, True) == (["[-1,-1,-1]"], ["[]"])
    assert fwd("argmax", x, 0, True, True) == (["[-1,-1,-1]"], ["[-1,-1,-1]"])


# ---- reverse ---------------------------------------------------------------------------------------
def test_reverse_reads_kept_dims_off_out_and_replicates_reduced_dims() -> None:
    x = spec(MESH22, [8, 6, 4], [-1, -1, -1])
    out = spec(MESH22, [8, 4], [1, -1])
    assert rev("max", x, out, [1], False) == (["[1,-1,-1]"], ["[1,-1]"])
    out_k = spec(MESH22, [1, 6, 4], [-1, 0, 1])
    assert rev("sum", x, out_k, [0], True) == (["[-1,0,1]"], ["[-1,0,1]"])


def test_reverse_returns_the_out_its_x_produces() -> None:
    # all/reverse/70: out P{0:sum}; x's reduced dim is replicated, so out is exact, not partial.
    mesh = MESH4
    x = spec(mesh, [12, 4, 8, 12], [-1, -1, 0, -1])
    out = spec(mesh, [12, 4, 12], [-1, -1, -1], {0: "sum"})
    assert rev("all", x, out, [2], False) == (["[-1,-1,-1,-1]"], ["[-1,-1,-1]"])
    # all/reverse/61: two kept size-1 dims on different mesh dims; Paddle raises a conflict, but
    # they are replicated anyway, so there is none.
    x2 = spec(MESH22, [6, 16], [1, 0])
    assert rev("all", x2, spec(MESH22, [1, 1], [1, 0]), [-2, 1], True) == (["[-1,-1]"], ["[-1,-1]"])


def test_reverse_variants_of_the_signatures() -> None:
    x = spec(MESH22, [8, 6], [-1, -1])
    assert rev("reduce_base", x, spec(MESH22, [8], [0]), [1], False) == (["[0,-1]"], ["[0]"])
    assert rev("logsumexp", x, spec(MESH22, [8], [1]), [-1], False, False) == (
        ["[1,-1]"], ["[1]"])
    assert rev("p_norm", x, spec(MESH22, [6], [0]), 2.0, 0, 1e-12, False, False) == (
        ["[-1,0]"], ["[0]"])
    assert rev("argmax", x, spec(MESH22, [8], [1]), 1, False, False) == (["[1,-1]"], ["[1]"])
    assert rev("argmax", x, spec(MESH22, [], []), 1, False, True) == (["[-1,-1]"], ["[]"])
    assert rev("argmin", x, spec(MESH22, [8, 1], [0, 1]), 1, True, False) == (
        ["[0,-1]"], ["[0,-1]"])


# ---- errors: typed, naming the tensor, the dim and the fix -------------------------------------------
def test_axis_out_of_range_is_a_typed_error() -> None:
    with pytest.raises(RuleArgumentError, match=r"sum: axis 2 is out of range for 'x' of rank 2"):
        get_rule("sum").infer_forward(spec(MESH22, [8, 4], [0, -1]), [2], False)
    with pytest.raises(RuleArgumentError, match=r"argmax: axis -3 is out of range"):
        get_rule("argmax").infer_forward(spec(MESH22, [8, 4], [0, -1]), -3, False, False)


def test_repeated_axis_is_a_typed_error() -> None:
    with pytest.raises(RuleArgumentError, match="names dim 1 of 'x' twice"):
        get_rule("max").infer_forward(spec(MESH22, [8, 4], [0, -1]), [1, -1], False)


def test_bad_reduce_type_and_bad_out_shape_are_typed_errors() -> None:
    with pytest.raises(RuleArgumentError, match="reduce_type 7 is not a reduce type"):
        get_rule("reduce_base").infer_forward(spec(MESH22, [8, 4], [0, -1]), [1], False, 7)
    with pytest.raises(RuleArgumentError, match=r"'out' has shape \[4\] but reducing 'x'"):
        get_rule("sum").infer_reverse(
            spec(MESH22, [8, 4], [0, -1]), spec(MESH22, [4], [-1]), [1], False)
    with pytest.raises(RuleArgumentError, match=r"'out' has shape \[8, 4\] but the index"):
        get_rule("argmin").infer_reverse(
            spec(MESH22, [8, 4], [0, -1]), spec(MESH22, [8, 4], [-1, -1]), 1, False, False)


def test_zero_d_input() -> None:
    x0 = TensorSpec([], DistAttr(MESH22, []))
    assert fwd("sum", x0, [], False) == (["[]"], ["[]"])
    assert fwd("sum", x0, [-1], False) == (["[]"], ["[]"])
    assert fwd("argmax", x0, 0, False, False) == (["[]"], ["[]"])
    with pytest.raises(SpmdError):
        get_rule("sum").infer_forward(x0, [1], False)


# ---- execution proofs ------------------------------------------------------------------------------
def execute(kernel: Kernel, x: Array, x_attr: DistAttr, out_attr: DistAttr, out_shape: Sequence[int]
            ) -> Array:
    """Run ``kernel`` on every mesh coordinate's block of x and gather the output by out_attr."""
    blocks = run_local(kernel, [(x, x_attr)])
    return gather(blocks, out_shape, out_attr)


def wrong(kernel: Kernel, x: Array, x_attr: DistAttr, out_attr: DistAttr, expect: Array) -> bool:
    try:
        got = execute(kernel, x, x_attr, out_attr, expect.shape)
    except ShardMismatch:
        return True
    return not np.allclose(got.astype(float), expect.astype(float))


def check(kernel: Kernel, x: Array, x_attr: DistAttr, out_attr: DistAttr, expect: Array) -> None:
    got = execute(kernel, x, x_attr, out_attr, expect.shape)
    np.testing.assert_allclose(got.astype(float), expect.astype(float), rtol=1e-6)


def ours(op: str, *args: Any) -> tuple[DistAttr, DistAttr]:
    info = get_rule(op).infer_forward(*args)
    x_attr, out_attr = info.inputs[0], info.outputs[0]
    assert isinstance(x_attr, DistAttr) and isinstance(out_attr, DistAttr)
    return x_attr, out_attr


RNG = np.random.default_rng(7)
X10 = RNG.standard_normal((10, 10))
XB = np.ones((10, 10), dtype=bool)
XB[0, 3] = False  # all() is False on the first shard only: a sum of the shards' results says True


def _kernel(fn: Callable[..., Array], axes: tuple[int, ...], keep: bool, **kw: Any) -> Kernel:
    return lambda b: np.asarray(fn(b, axis=axes, keepdims=keep, **kw))


REDUCE_TYPE_CASES: list[tuple[str, Kernel, Array]] = [
    ("max", _kernel(np.max, (0, 1), False, initial=-np.inf), X10),
    ("amax", _kernel(np.max, (0, 1), False, initial=-np.inf), X10),
    ("reduce_max", _kernel(np.max, (0, 1), False, initial=-np.inf), X10),
    ("min", _kernel(np.min, (0, 1), False, initial=np.inf), X10),
    ("amin", _kernel(np.min, (0, 1), False, initial=np.inf), X10),
    ("prod", _kernel(np.prod, (0, 1), False), 1.0 + X10 / 10),
    ("all", _kernel(np.all, (0, 1), False), XB),
]


@pytest.mark.parametrize(("op", "kernel", "x"), REDUCE_TYPE_CASES, ids=[c[0] for c in REDUCE_TYPE_CASES])
def test_proof_reduce_type(op: str, kernel: Kernel, x: Array) -> None:
    # max/forward/0 on every op of the class: x[10,10]dm[0,-1], mesh [4], axis=[0,1]
    x_attr, out_attr = ours(op, spec(MESH4, [10, 10], [0, -1]), [0, 1], False)
    expect = kernel(x)
    paddle_out = da(MESH4, [], {0: "sum"})
    assert out_attr.partial_items != paddle_out.partial_items
    assert wrong(kernel, x, x_attr, paddle_out, expect)
    check(kernel, x, x_attr, out_attr, expect)
    case = _case(op, MESH4, [10, 10], [0, -1], {"axis": [0, 1], "keep_dim": False},
                 [0, -1], {}, [], {"0": "sum"})
    assert classify(case, get_rule(op).infer_forward(spec(MESH4, [10, 10], [0, -1]), [0, 1], False)
                    ) == "reduce-type"


def test_proof_reduce_type_any_and_p_norm_inf() -> None:
    # any: a sum partial of booleans is not a state the partial model admits (pieces of a sum
    # must add up in the tensor's dtype; booleans have no addition), so Paddle's P{0:sum} cannot even
    # be scattered; ours, P{0:any}, executes exactly.
    kernel = _kernel(np.any, (0,), True)
    xb = RNG.standard_normal((32,)) > 1.5
    x_attr, out_attr = ours("any", spec(MESH22, [32], [0]), [0], True)
    assert out_attr == da(MESH22, [-1], {0: "any"})
    with pytest.raises(SpmdError, match="sum partial cannot hold booleans"):
        scatter(kernel(xb), da(MESH22, [-1], {0: "sum"}))
    check(kernel, xb, x_attr, out_attr, kernel(xb))
    # p_norm, p = inf: a max of |x| (p_norm/forward/18)
    x = RNG.standard_normal((4, 4))

    def pinf(b: Array) -> Array:
        return np.asarray(np.max(np.abs(b), axis=1, initial=0.0))

    mesh = ProcessMesh.from_shape([2, 2, 2], list(range(8)))
    x_attr, out_attr = ours("p_norm", spec(mesh, [4, 4], [-1, 0]), float("inf"), 1, 1e-12, False,
                            False)
    assert wrong(pinf, x, x_attr, da(mesh, [-1], {0: "sum"}), pinf(x))
    check(pinf, x, x_attr, out_attr, pinf(x))


def test_paddle_sum_partial_is_right_for_sum_like_ops() -> None:
    # Where Paddle's sum is right we agree: sum, squared_l2_norm, p_norm p=0 (count) and p=1.
    x = RNG.standard_normal((8, 6))
    x[x > 1.0] = 0.0
    kernels: dict[str, tuple[Kernel, tuple[Any, ...]]] = {
        "sum": (_kernel(np.sum, (1,), False), ([1], False)),
        "squared_l2_norm": (lambda b: np.sum(b * b, axis=1), ([1], False)),
        "p_norm0": (lambda b: np.count_nonzero(b, axis=1).astype(float), (0.0, 1, 1e-12, False,
                                                                          False)),
        "p_norm1": (lambda b: np.sum(np.abs(b), axis=1), (1.0, 1, 1e-12, False, False)),
    }
    for name, (kernel, attrs) in kernels.items():
        op = "p_norm" if name.startswith("p_norm") else name
        x_attr, out_attr = ours(op, spec(MESH42, [8, 6], [-1, 0]), *attrs)
        assert out_attr == da(MESH42, [-1], {0: "sum"}), name
        check(kernel, x, x_attr, out_attr, kernel(x))


def _frob(b: Array) -> Array:
    return np.asarray(np.sqrt(np.sum(b * b)))


def _lse0(b: Array) -> Array:
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.sum(np.exp(b), axis=0, keepdims=True)))


def _p2(b: Array) -> Array:
    return np.asarray(np.sum(np.abs(b) ** 2, axis=2) ** 0.5)


def test_proof_reduce_not_combinable() -> None:
    # frobenius_norm/forward/3: x[16]dm[1] on mesh [2,4], axis=[] -> Paddle P{1:sum}
    x = RNG.standard_normal((16,))
    x_attr, out_attr = ours("frobenius_norm", spec(MESH24, [16], [1]), [], False)
    assert (x_attr, out_attr) == (da(MESH24, [-1]), da(MESH24, []))
    assert wrong(_frob, x, da(MESH24, [1]), da(MESH24, [], {1: "sum"}), _frob(x))
    check(_frob, x, x_attr, out_attr, _frob(x))
    # logsumexp/forward/1: x[16]dm[0] on mesh [4], axis=[0], keepdims -> Paddle [-1] P{0:sum}
    x_attr, out_attr = ours("logsumexp", spec(MESH4, [16], [0]), [0], True, False)
    assert (x_attr, out_attr) == (da(MESH4, [-1]), da(MESH4, [-1]))
    assert wrong(_lse0, x, da(MESH4, [0]), da(MESH4, [-1], {0: "sum"}), _lse0(x))
    check(_lse0, x, x_attr, out_attr, _lse0(x))
    # p_norm/forward/3: x[7,4,2,6]dm[-1,-1,1,0], p=2, axis=2 -> Paddle [-1,-1,0] P{1:sum}
    x4 = RNG.standard_normal((7, 4, 2, 6))
    x_attr, out_attr = ours("p_norm", spec(MESH22, [7, 4, 2, 6], [-1, -1, 1, 0]), 2.0, 2, 1e-12,
                            False, False)
    assert (x_attr, out_attr) == (da(MESH22, [-1, -1, -1, 0]), da(MESH22, [-1, -1, 0]))
    assert wrong(_p2, x4, da(MESH22, [-1, -1, 1, 0]), da(MESH22, [-1, -1, 0], {1: "sum"}), _p2(x4))
    check(_p2, x4, x_attr, out_attr, _p2(x4))
    case = _case("logsumexp", MESH4, [16], [0], {"axis": [0], "keepdims": True,
                 "reduce_all": False}, [0], {}, [-1], {"0": "sum"})
    got = get_rule("logsumexp").infer_forward(spec(MESH4, [16], [0]), [0], True, False)
    assert classify(case, got) == "reduce-not-combinable"


def test_proof_reduce_uneven_mean() -> None:
    # mean_all/forward/1: x[2,2,7]dm[0,1,-1] on mesh [4,2] -> Paddle P{0:avg,1:avg}. Dim 0 (size 2)
    # cut into 4 blocks has empty blocks whose mean is nan, and unequal blocks weigh wrongly.
    def mean(b: Array) -> Array:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.mean(b)) if b.size else np.asarray(np.nan)

    x = RNG.standard_normal((2, 2, 7))
    x_attr, out_attr = ours("mean_all", spec(MESH42, [2, 2, 7], [0, 1, -1]))
    assert (x_attr, out_attr) == (da(MESH42, [-1, 1, -1]), da(MESH42, [], {1: "avg"}))
    assert wrong(mean, x, da(MESH42, [0, 1, -1]), da(MESH42, [], {0: "avg", 1: "avg"}), mean(x))
    check(mean, x, x_attr, out_attr, mean(x))
    # reduce_base/forward/20: x[8,10]dm[-1,0] on mesh [8], avg over all: 10 % 8 != 0
    mesh8 = ProcessMesh.from_shape([8], list(range(8)))
    x2 = RNG.standard_normal((8, 10))
    x_attr, out_attr = ours("reduce_base", spec(mesh8, [8, 10], [-1, 0]), [-2, -1], False, 4)
    assert (x_attr, out_attr) == (da(mesh8, [-1, -1]), da(mesh8, []))
    assert wrong(mean, x2, da(mesh8, [-1, 0]), da(mesh8, [], {0: "avg"}), mean(x2))
    check(mean, x2, x_attr, out_attr, mean(x2))
    # an even split keeps Paddle's avg partial, and it is exact
    x_attr, out_attr = ours("mean_all", spec(MESH42, [8, 2, 7], [0, 1, -1]))
    assert out_attr == da(MESH42, [], {0: "avg", 1: "avg"})
    x3 = RNG.standard_normal((8, 2, 7))
    check(mean, x3, x_attr, out_attr, mean(x3))


def test_proof_logsumexp_reduce_all_out() -> None:
    # logsumexp/reverse/29: x[2,2,2], axis=[0,2], keepdims, reduce_all=True, out [1,1,1]dm[-1,1,0].
    # The kernel reduces over axis only (Paddle's own kernel: reduce_all is not read), so its output
    # has shape [1,2,1]: Paddle's answer (x [-1,1,-1], out as given) cannot be gathered into the
    # given out; we reject the out shape.
    x = RNG.standard_normal((2, 2, 2))

    def lse(b: Array) -> Array:
        return np.asarray(np.log(np.sum(np.exp(b), axis=(0, 2), keepdims=True)))

    assert lse(x).shape == (1, 2, 1)
    with pytest.raises(ShardMismatch):
        execute(lse, x, da(MESH22, [-1, 1, -1]), da(MESH22, [-1, 1, 0]), (1, 1, 1))
    with pytest.raises(RuleArgumentError, match=r"'out' has shape \[1, 1, 1\]"):
        get_rule("logsumexp").infer_reverse(
            spec(MESH22, [2, 2, 2], [-1, 1, 0]), spec(MESH22, [1, 1, 1], [-1, 1, 0]),
            [0, 2], True, True)


def test_proof_reduce_reverse_out() -> None:
    # all/reverse/70 as a sum (same attrs, sum is linear): x[12,4,8,12]dm[-1,-1,0,-1] on mesh [4],
    # out[12,4,12] P{0:sum}, axis=[2]. Both answers replicate x's reduced dim; Paddle keeps out's
    # P{0:sum} next to a whole x, which adds the 4 replicas of an exact result. Ours gives x
    # out's pending sum: the local sums of its pieces are the pieces of out's sum.
    x = RNG.standard_normal((12, 4, 8, 12))

    def s2(b: Array) -> Array:
        return np.asarray(np.sum(b, axis=2))

    info = get_rule("sum").infer_reverse(spec(MESH4, [12, 4, 8, 12], [-1, -1, 0, -1]),
                                         spec(MESH4, [12, 4, 12], [-1, -1, -1], {0: "sum"}), [2],
                                         False)
    x_attr, out_attr = info.inputs[0], info.outputs[0]
    assert isinstance(x_attr, DistAttr) and isinstance(out_attr, DistAttr)
    assert (x_attr, out_attr) == (da(MESH4, [-1] * 4, {0: "sum"}), da(MESH4, [-1] * 3, {0: "sum"}))
    assert wrong(s2, x, da(MESH4, [-1] * 4), da(MESH4, [-1, -1, -1], {0: "sum"}), s2(x))
    check(s2, x, x_attr, out_attr, s2(x))
    # all/reverse/67: out[1]dm[1] (keep_dim) on mesh [2,3]: Paddle echoes the sharded size-1 dim,
    # whose blocks the replicated computation cannot tile.
    mesh23 = ProcessMesh.from_shape([2, 3], list(range(6)))
    xb = np.ones(16, dtype=bool)
    xb[5] = False

    def all0(b: Array) -> Array:
        return np.asarray(np.all(b, axis=0, keepdims=True))

    info = get_rule("all").infer_reverse(spec(mesh23, [16], [0]), spec(mesh23, [1], [1], {0: "sum"}),
                                         [0], True)
    x_attr, out_attr = info.inputs[0], info.outputs[0]
    assert isinstance(x_attr, DistAttr) and isinstance(out_attr, DistAttr)
    assert (x_attr, out_attr) == (da(mesh23, [-1]), da(mesh23, [-1]))
    assert wrong(all0, xb, x_attr, da(mesh23, [1], {0: "sum"}), all0(xb))
    assert wrong(all0, xb, x_attr, da(mesh23, [1]), all0(xb))
    check(all0, xb, x_attr, out_attr, all0(xb))


def test_proof_arg_reverse_axis() -> None:
    # argmax/reverse/40: out[2,1]dm[0,1], axis=1, keepdims on mesh [2,2] (x [2,8]): Paddle x [0,1].
    x = RNG.standard_normal((2, 8))

    def am(b: Array) -> Array:
        return np.asarray(np.argmax(b, axis=1, keepdims=True))

    info = get_rule("argmax").infer_reverse(spec(MESH22, [2, 8], [-1, -1]),
                                            spec(MESH22, [2, 1], [0, 1]), 1, True, False)
    x_attr, out_attr = info.inputs[0], info.outputs[0]
    assert isinstance(x_attr, DistAttr) and isinstance(out_attr, DistAttr)
    assert (x_attr, out_attr) == (da(MESH22, [0, -1]), da(MESH22, [0, -1]))
    assert wrong(am, x, da(MESH22, [0, 1]), da(MESH22, [0, 1]), am(x))
    check(am, x, x_attr, out_attr, am(x))


def test_proof_arg_flatten_rank() -> None:
    # argmax/forward with flatten and not keepdims: the index is 0-d (paddle.argmax(x).shape == []).
    x = RNG.standard_normal((8, 4))

    def am(b: Array) -> Array:
        return np.asarray(np.argmax(b))

    x_attr, out_attr = ours("argmax", spec(MESH22, [8, 4], [0, 1]), 0, False, True)
    assert (x_attr, out_attr) == (da(MESH22, [-1, -1]), da(MESH22, []))
    with pytest.raises(ShardMismatch):
        execute(am, x, x_attr, da(MESH22, [-1]), am(x).shape)
    check(am, x, x_attr, out_attr, am(x))


def test_predicates_are_narrow() -> None:
    # an agreement-shaped answer with the wrong type is not filed as reduce-type
    got = get_rule("max").infer_forward(spec(MESH4, [10, 10], [0, -1]), [0, 1], False)
    wrong_map = _case("max", MESH4, [10, 10], [0, -1], {"axis": [0, 1], "keep_dim": False},
                      [-1, -1], {}, [], {"0": "sum"})
    assert classify(wrong_map, got) is None
    sum_case = _case("sum", MESH4, [10, 10], [0, -1], {"axis": [0, 1], "keep_dim": False},
                     [0, -1], {}, [], {"0": "max"})
    assert classify(sum_case, get_rule("sum").infer_forward(
        spec(MESH4, [10, 10], [0, -1]), [0, 1], False)) is None


def _case(op: str, mesh: ProcessMesh, shape: list[int], dm: list[int], attrs: dict[str, Any],
          exp_x: list[int], exp_xp: dict[str, str], exp_out: list[int], exp_op: dict[str, str]
          ) -> dict[str, Any]:
    return {
        "op": op, "direction": "forward", "mesh": {"shape": list(mesh.shape)},
        "inputs": [{"name": "x", "shape": shape, "dims_mapping": dm, "partial": {}}],
        "attrs": attrs,
        "expected": {"inputs": [{"dims_mapping": exp_x, "partial": exp_xp}],
                     "outputs": [{"dims_mapping": exp_out, "partial": exp_op}]},
    }


def test_norms_over_a_sharded_size_one_dim_stay_partial() -> None:
    """issue 14, defect 5: over a sharded size-1 dim only one block holds the element and the
    others are empty (norm 0), so the per-shard norms add up: no gather, a sum partial."""
    from proofs import execute

    x = spec(MESH22, [4, 1, 6], [-1, 0, -1])
    frob = get_rule("frobenius_norm").infer_forward(x, [1], False)
    assert maps(frob) == (["[-1,0,-1]"], ["[-1,-1] P{0:sum}"])
    assert execute("frobenius_norm", [x], frob, {"axis": [1], "keep_dim": False}) == "ok"
    attrs = {"porder": 2.0, "axis": 1, "epsilon": 1e-12, "keepdims": False, "asvector": False}
    pn = get_rule("p_norm").infer_forward(x, *attrs.values())
    assert maps(pn) == (["[-1,0,-1]"], ["[-1,-1] P{0:sum}"])
    assert execute("p_norm", [x], pn, attrs) == "ok"
    # mixed with a dim of size > 1: that one is gathered, the size-1 one stays partial
    x2 = spec(MESH22, [4, 1, 6], [0, 1, -1])
    both = get_rule("frobenius_norm").infer_forward(x2, [0, 1], False)
    assert maps(both) == (["[-1,1,-1]"], ["[-1] P{1:sum}"])
    assert execute("frobenius_norm", [x2], both, {"axis": [0, 1], "keep_dim": False}) == "ok"
