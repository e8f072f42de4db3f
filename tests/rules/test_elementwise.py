"""The elementwise family: hand cases from Paddle's quirks, typed errors, and proofs by execution."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proofs import execute as execute_case

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import ShardMismatch, gather, run_local
from spmdrules.core.spec import SpmdInfo, TensorSpec

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
MESH3 = sr.ProcessMesh([[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
Array = np.ndarray[Any, Any]


def spec(
    shape: Sequence[int],
    dm: Sequence[int],
    partial: dict[int, str] | None = None,
    mesh: sr.ProcessMesh = MESH,
) -> TensorSpec:
    return TensorSpec(shape, DistAttr(mesh, dm, partial))


def dms(info: SpmdInfo) -> tuple[list[Any], list[Any]]:
    """Flat dims mappings with partials, e.g. ``([[0, -1], ([-1], {0: 'sum'})], ...)``."""

    def one(a: Any) -> Any:
        if a is None:
            return None
        m = list(a.dims_mapping)
        return (m, a.partial) if a.partial else m

    return [one(a) for a in info.inputs], [one(a) for a in info.outputs]


def fwd(op: str, *args: Any, **kw: Any) -> SpmdInfo:
    return sr.get_rule(op).infer_forward(*args, **kw)


def rev(op: str, *args: Any, **kw: Any) -> SpmdInfo:
    return sr.get_rule(op).infer_reverse(*args, **kw)


# ---- unary ---------------------------------------------------------------------------------------
def test_unary_keeps_divisible_shardings() -> None:
    assert dms(fwd("relu", spec([8, 6], [0, 1]))) == ([[0, 1]], [[0, 1]])


def test_unary_keeps_uneven_shards() -> None:
    """Paddle replicates a dim its mesh dims do not divide (quirk 6); we keep the shard (class
    keeps-uneven-shard): each block, of any size, is computed whole. Both answers execute."""
    mesh8 = sr.ProcessMesh(list(range(8)))
    assert dms(fwd("relu", spec([4], [0], mesh=mesh8))) == ([[0]], [[0]])
    assert dms(fwd("relu", spec([16], [0], mesh=mesh8))) == ([[0]], [[0]])
    assert dms(fwd("exp", spec([7, 5], [0, 1]))) == ([[0, 1]], [[0, 1]])
    assert dms(fwd("gelu", spec([1, 4], [0, 1]), approximate=True)) == ([[0, 1]], [[0, 1]])
    for op, x in (("exp", spec([7, 5], [0, 1])), ("relu", spec([3], [0], mesh=mesh8))):
        ours = fwd(op, x)
        whole = sr.DistAttr(x.attr.mesh, [-1] * len(x.shape))
        paddle = sr.SpmdInfo([whole], [whole])
        assert execute_case(op, [x], ours, {}) == execute_case(op, [x], paddle, {}) == "ok"


def test_unary_drops_partial_quirk11() -> None:
    assert dms(fwd("tanh", spec([4, 4], [0, -1], {1: "sum"}))) == ([[0, -1]], [[0, -1]])


def test_unary_reverse_follows_out() -> None:
    info = rev("sigmoid", spec([8, 6], [-1, -1]), spec([8, 6], [1, 0]))
    assert dms(info) == ([[1, 0]], [[1, 0]])


def test_gelu_grad_follows_out_grad_without_divisibility() -> None:
    info = fwd("gelu_grad", spec([3, 6], [1, -1]), spec([3, 6], [0, 1], {}), True)
    assert dms(info) == ([[0, 1], [0, 1]], [[0, 1]])


# ---- binary --------------------------------------------------------------------------------------
def test_earlier_input_wins_a_contested_mesh_dim_quirk4() -> None:
    x, y = spec([16, 4], [0, -1]), spec([16, 4], [-1, 0])
    assert dms(fwd("add", x, y)) == ([[0, -1], [0, -1]], [[0, -1]])
    assert dms(fwd("add", y, x)) == ([[-1, 0], [-1, 0]], [[-1, 0]])


def test_size1_dims_never_sharded_and_claim_their_mesh_dim_quirk5() -> None:
    info = fwd("add", spec([1, 4], [1, -1]), spec([16, 4], [1, -1]))
    assert dms(info) == ([[-1, -1], [-1, -1]], [[-1, -1]])
    info = fwd("add", spec([1, 4], [0, -1]), spec([16, 4], [1, -1]))
    assert dms(info) == ([[-1, -1], [1, -1]], [[1, -1]])
    # add/forward/0
    info = fwd("add", spec([1, 4], [1, 0]), spec([9, 16, 4], [-1, 1, -1]))
    assert dms(info) == ([[-1, 0], [-1, -1, 0]], [[-1, -1, 0]])


def test_binary_does_not_check_divisibility_quirk7() -> None:
    assert dms(fwd("add", spec([7, 5], [0, 1]), spec([7, 5], [-1, -1]))) == (
        [[0, 1], [0, 1]],
        [[0, 1]],
    )


def test_binary_drops_partials_quirk11() -> None:
    info = fwd("subtract", spec([4, 8], [-1, -1], {0: "sum"}), spec([4, 8], [-1, 1]))
    assert dms(info) == ([[-1, 1], [-1, 1]], [[-1, 1]])


def test_binary_reverse_replicates_size1_dims() -> None:
    # add/reverse/18: x[12] and y[1, 1] follow out[1, 12]; its size-1 dim is replicated as they
    # produce it (Paddle echoes out [0, 1]: binary-reverse-size1-out-replicated)
    mesh = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    info = rev(
        "add", spec([12], [-1], mesh=mesh), spec([1, 1], [-1, -1], mesh=mesh),
        spec([1, 12], [0, 1], mesh=mesh),
    )
    assert dms(info) == ([[1], [-1, -1]], [[-1, 1]])


def test_binary_reverse_drops_out_partial() -> None:
    info = rev("multiply", spec([8, 4], [-1, -1]), spec([8, 4], [-1, -1]), spec([8, 4], [0, -1], {1: "sum"}))
    assert dms(info) == ([[0, -1], [0, -1]], [[0, -1]])


def test_binary_reverse_size1_out_dims_on_two_mesh_dims_conflict() -> None:
    # divide/reverse/135: both size-1 out dims are the one broadcast axis of Paddle's notation
    with pytest.raises(sr.ShardingConflictError, match=r"size-1 dims 'out' dim 0 and 'out' dim 2"):
        rev("divide", spec([1], [1], mesh=MESH3), spec([1, 4, 1, 6], [1, 0, -1, 2], mesh=MESH3),
            spec([1, 4, 1, 6], [2, -1, 0, 1], mesh=MESH3))


# ---- multiply: partial pass-through (quirk 12) ---------------------------------------------------
def test_multiply_keeps_xs_partial() -> None:
    info = fwd("multiply", spec([4, 8], [-1, 1], {0: "sum"}), spec([4, 8], [-1, -1]))
    assert dms(info) == ([([-1, 1], {0: "sum"}), [-1, 1]], [([-1, 1], {0: "sum"})])


def test_multiply_keeps_only_one_partial_operand() -> None:
    # multiply/forward/33: x's partial wins, y's is resolved before the op
    info = fwd("multiply", spec([4, 8], [-1, -1], {1: "sum"}), spec([4, 8], [-1, -1], {0: "sum", 1: "sum"}))
    assert dms(info) == ([([-1, -1], {1: "sum"}), [-1, -1]], [([-1, -1], {1: "sum"})])
    # y's partial stays when x has none
    info = fwd("multiply", spec([16], [-1]), spec([16], [1], {0: "sum"}))
    assert dms(info) == ([[1], ([1], {0: "sum"})], [([1], {0: "sum"})])


def test_multiply_drops_partial_colliding_with_a_sharded_mesh_dim() -> None:
    # multiply/forward/40 and /87: the partial mesh dim also shards the result -> no partial at all
    info = fwd("multiply", spec([16, 6, 16], [1, -1, 0]), spec([16], [-1], {0: "sum"}))
    assert dms(info) == ([[1, -1, 0], [0]], [[1, -1, 0]])
    info = fwd("multiply", spec([16], [1], mesh=MESH3), spec([16], [-1], {0: "sum", 1: "sum"}, MESH3))
    assert dms(info) == ([[1], [1]], [[1]])


def test_multiply_drops_a_non_linear_partial() -> None:
    info = fwd("multiply", spec([4, 8], [-1, 1], {0: "max"}), spec([4, 8], [-1, -1]))
    assert dms(info) == ([[-1, 1], [-1, 1]], [[-1, 1]])


# ---- swiglu --------------------------------------------------------------------------------------
def test_swiglu_with_y_is_the_binary_rule() -> None:
    info = fwd("swiglu", spec([8, 6], [0, 1]), spec([8, 6], [-1, -1]))
    assert dms(info) == ([[0, 1], [0, 1]], [[0, 1]])


def test_swiglu_without_y_keeps_the_halves_dim_whole() -> None:
    info = fwd("swiglu", spec([8, 6], [0, 1]), None)
    assert dms(info) == ([[0, -1], None], [[0, -1]])
    # an uneven dim keeps its shard, as in the unary rules (keeps-uneven-shard)
    info = fwd("swiglu", spec([7, 4], [0, -1], mesh=sr.ProcessMesh([[0, 1], [2, 3], [4, 5], [6, 7]])), None)
    assert dms(info) == ([[0, -1], None], [[0, -1]])
    info = rev("swiglu", spec([6, 8], [-1, -1]), None, spec([6, 4], [0, 1]))
    assert dms(info) == ([[0, -1], None], [[0, -1]])


def test_swiglu_rank0_y_forward_stands_for_no_y_as_in_reverse() -> None:
    # issue 14, defect 2: x[4,8] dm[-1,0] with a rank-0 y was answered dm[-1,0]
    mesh2 = sr.ProcessMesh([0, 1])
    y0 = TensorSpec([], DistAttr(mesh2, []))
    ours = fwd("swiglu", spec([4, 8], [-1, 0], mesh=mesh2), y0)
    assert dms(ours) == ([[-1, -1], []], [[-1, -1]])
    back = rev("swiglu", spec([4, 8], [-1, 0], mesh=mesh2), y0, spec([4, 4], [-1, 0], mesh=mesh2))
    assert dms(back) == dms(ours)  # the two directions agree
    x = np.random.default_rng(2).standard_normal((4, 8))
    run = SpmdInfo([ours.inputs[0], None], list(ours.outputs))
    np.testing.assert_allclose(execute(swiglu_kernel, [x], run, (4, 4)), swiglu_kernel(x))
    before = SpmdInfo([DistAttr(mesh2, [-1, 0]), None], [DistAttr(mesh2, [-1, 0])])
    assert not np.allclose(execute(swiglu_kernel, [x], before, (4, 4)), swiglu_kernel(x))


def test_swiglu_rank0_y_reverse_stands_for_no_y() -> None:
    # swiglu/reverse/86: Paddle's broadcasting rule, hence no divisibility check on out
    mesh8 = sr.ProcessMesh(list(range(8)))
    y0 = TensorSpec([], DistAttr(mesh8, []))
    info = rev("swiglu", spec([3, 4], [0, -1], mesh=mesh8), y0, spec([3, 2], [0, -1], mesh=mesh8))
    assert dms(info) == ([[0, -1], []], [[0, -1]])


# ---- typed errors that name the tensor, the dim and the fix -------------------------------------
def test_same_axis_on_two_mesh_dims_is_a_conflict_quirk1() -> None:
    with pytest.raises(sr.ShardingConflictError) as e:
        fwd("add", spec([8, 16], [0, -1]), spec([8, 16], [1, -1]))
    msg = str(e.value)
    assert msg.startswith("add:") and "'x' dim 0" in msg and "'y' dim 0" in msg
    assert "replicate" in msg


def test_size1_dims_on_two_mesh_dims_conflict() -> None:
    # maximum/forward/149
    mesh = sr.ProcessMesh([[[0, 1, 2, 3], [4, 5, 6, 7]]])
    with pytest.raises(sr.ShardingConflictError, match=r"size-1 dims 'x' dim 0 and 'y' dim 0"):
        fwd("maximum", spec([1, 32], [1, 0], mesh=mesh), spec([1], [0], {1: "sum"}, mesh))


def test_shapes_that_do_not_broadcast() -> None:
    with pytest.raises(sr.RuleArgumentError, match=r"'x' dim 1 \(size 3\) and 'y' dim 0 \(size 4\)"):
        fwd("add", spec([2, 3], [-1, -1]), spec([4], [-1]))


def test_reverse_needs_the_broadcast_output_shape() -> None:
    with pytest.raises(sr.RuleArgumentError, match=r"'out' has shape \[2, 4\]"):
        rev("add", spec([2, 3], [-1, -1]), spec([3], [-1]), spec([2, 4], [-1, -1]))
    with pytest.raises(sr.RuleArgumentError, match=r"'x' has shape \[2, 3\] but 'out' has \[3, 2\]"):
        rev("relu", spec([2, 3], [-1, -1]), spec([3, 2], [-1, -1]))


def test_swiglu_without_y_needs_an_even_last_dim() -> None:
    with pytest.raises(sr.RuleArgumentError, match=r"'x' has shape \[4, 5\].*even last dim"):
        fwd("swiglu", spec([4, 5], [-1, -1]), None)
    with pytest.raises(sr.RuleArgumentError, match=r"'out' has shape \[4, 4\]"):
        rev("swiglu", spec([4, 6], [-1, -1]), None, spec([4, 4], [-1, -1]))


def test_gelu_grad_needs_matching_shapes() -> None:
    with pytest.raises(sr.RuleArgumentError, match=r"'x' has shape \[4\] but 'out_grad' has \[5\]"):
        fwd("gelu_grad", spec([4], [-1]), spec([5], [-1]), False)


# ---- proofs by execution -------------------------------------------------------------------------
Kernel = Callable[..., Array]


def execute(kernel: Kernel, arrays: Sequence[Array], info: SpmdInfo, out_shape: Sequence[int]) -> Array:
    """Run ``kernel`` on every mesh coordinate's blocks as ``info`` lays them out; gather the out."""
    ins: list[tuple[Array, DistAttr]] = []
    for a, attr in zip(arrays, info.inputs, strict=False):
        if attr is not None:
            assert isinstance(attr, DistAttr)
            ins.append((np.asarray(a), attr))
    ranks = [a.ndim for a, _ in ins]

    def local(*blocks: Array) -> Array:
        # simulate.scatter hands a rank-0 tensor's block out as shape [1]; give it its rank back.
        fixed = (b if r else b.reshape(()) for b, r in zip(blocks, ranks, strict=True))
        return np.asarray(kernel(*fixed))

    blocks = run_local(local, ins, np.random.default_rng(3))
    out = info.outputs[0]
    assert isinstance(out, DistAttr)
    return gather(blocks, out_shape, out)


def swiglu_kernel(x: Array) -> Array:
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.asarray(a / (1.0 + np.exp(-a)) * b)


def test_proof_swiglu_halves_replicated() -> None:
    # swiglu/forward/75 on mesh [4, 2]: x[8, 6] dims_mapping [0, 1], y absent.
    mesh = sr.ProcessMesh([[0, 1], [2, 3], [4, 5], [6, 7]])
    x = np.random.default_rng(0).standard_normal((8, 6))
    serial = swiglu_kernel(x)
    ours = fwd("swiglu", spec([8, 6], [0, 1], mesh=mesh), None)
    assert dms(ours) == ([[0, -1], None], [[0, -1]])
    np.testing.assert_allclose(execute(swiglu_kernel, [x], ours, (8, 3)), serial)
    paddle = SpmdInfo([DistAttr(mesh, [0, 1]), None], [DistAttr(mesh, [0, 1])])
    # Each block holds 3 columns: not even a pair of halves, so the blocks don't fit together.
    with pytest.raises(ShardMismatch):
        execute(swiglu_kernel, [x], paddle, (8, 3))
    # With an even block the shapes fit, and the value is wrong: a block is [gate_i | gate_j].
    x = np.random.default_rng(1).standard_normal((4, 8))
    mesh2 = sr.ProcessMesh([0, 1])
    paddle = SpmdInfo([DistAttr(mesh2, [-1, 0]), None], [DistAttr(mesh2, [-1, 0])])
    assert not np.allclose(execute(swiglu_kernel, [x], paddle, (4, 4)), swiglu_kernel(x))
    ours = fwd("swiglu", spec([4, 8], [-1, 0], mesh=mesh2), None)
    np.testing.assert_allclose(execute(swiglu_kernel, [x], ours, (4, 4)), swiglu_kernel(x))


def test_proof_binary_reverse_size1_out_replicated() -> None:
    # add/reverse/18 on mesh [2, 4]: x[12] [-1], y[1, 1] [-1, -1], out[1, 12] [0, 1].
    mesh = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(12), rng.standard_normal((1, 1))
    paddle = SpmdInfo(
        [DistAttr(mesh, [1]), DistAttr(mesh, [-1, -1])], [DistAttr(mesh, [0, 1])]
    )
    # Every device computes its row of out (the one row there is); out [0, 1] says that only
    # the devices at mesh coordinate 0 hold it, so the blocks cannot be laid out as Paddle says.
    with pytest.raises(ShardMismatch):
        execute(np.add, [x, y], paddle, (1, 12))
    ours = rev(
        "add", spec([12], [-1], mesh=mesh), spec([1, 1], [-1, -1], mesh=mesh),
        spec([1, 12], [0, 1], mesh=mesh),
    )
    np.testing.assert_allclose(execute(np.add, [x, y], ours, (1, 12)), x + y)


def test_proof_multiply_partial_pass_through() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4, 8)), rng.standard_normal((3, 4, 8))
    info = fwd("multiply", spec([4, 8], [-1, 1], {0: "sum"}), spec([3, 4, 8], [-1, -1, 1]))
    assert dms(info)[1] == [([-1, -1, 1], {0: "sum"})]
    np.testing.assert_allclose(execute(np.multiply, [x, y], info, (3, 4, 8)), x * y)
    # the same for y's avg partial
    info = fwd("multiply", spec([4, 8], [0, -1]), spec([3, 4, 8], [-1, 0, -1], {1: "avg"}))
    assert dms(info)[1] == [([-1, 0, -1], {1: "avg"})]
    np.testing.assert_allclose(execute(np.multiply, [x, y], info, (3, 4, 8)), x * y)


def test_proof_multiply_max_partial_must_not_pass_through() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((4, 8)), -np.abs(rng.standard_normal((4, 8))) - 0.5
    xs, ys = spec([4, 8], [-1, 1], {0: "max"}), spec([4, 8], [-1, -1])
    ours = fwd("multiply", xs, ys)
    np.testing.assert_allclose(execute(np.multiply, [x, y], ours, (4, 8)), x * y)
    kept = SpmdInfo(
        [DistAttr(MESH, [-1, 1], {0: "max"}), DistAttr(MESH, [-1, 1])],
        [DistAttr(MESH, [-1, 1], {0: "max"})],
    )
    assert not np.allclose(execute(np.multiply, [x, y], kept, (4, 8)), x * y)


MESHES = [
    sr.ProcessMesh([0, 1, 2]),
    MESH,
    sr.ProcessMesh([[0, 1, 2], [3, 4, 5]]),
    MESH3,
]


def _random_attr(draw: st.DrawFn, mesh: sr.ProcessMesh, rank: int) -> DistAttr:
    free = list(range(mesh.ndim))
    dm = []
    for _ in range(rank):
        d = draw(st.sampled_from([-1, *free]))
        if d >= 0:
            free.remove(d)
        dm.append(d)
    part = {d: draw(st.sampled_from(["sum", "avg", "max"])) for d in free if draw(st.booleans())}
    return DistAttr(mesh, dm, part)


@st.composite
def binary_call(draw: st.DrawFn) -> tuple[TensorSpec, TensorSpec, TensorSpec]:
    """x and y that broadcast, and an attribute for their output (for the reverse rule)."""
    mesh = draw(st.sampled_from(MESHES))
    base = draw(st.lists(st.integers(1, 6), min_size=0, max_size=3))
    specs = []
    for _ in range(2):
        rank = draw(st.integers(0, len(base)))
        shape = [n if draw(st.booleans()) else 1 for n in base[len(base) - rank :]]
        specs.append(TensorSpec(shape, _random_attr(draw, mesh, rank)))
    out_shape = np.broadcast_shapes(specs[0].shape, specs[1].shape)
    out = TensorSpec(out_shape, _random_attr(draw, mesh, len(out_shape)))
    return specs[0], specs[1], out


@settings(max_examples=80, deadline=None)
@given(binary_call(), st.sampled_from(["add", "multiply", "maximum"]))
def test_binary_rules_compute_the_serial_result(
    call: tuple[TensorSpec, TensorSpec, TensorSpec], op: str
) -> None:
    xs, ys, outs = call
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(xs.shape), rng.standard_normal(ys.shape)
    kernel: Kernel = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum}[op]
    try:
        info = fwd(op, xs, ys)
    except sr.ShardingConflictError:
        pass
    else:
        np.testing.assert_allclose(execute(kernel, [x, y], info, outs.shape), kernel(x, y))
    # the reverse rule's inputs and output form a consistent pair for any requested output
    try:
        back = rev(op, xs, ys, outs)
    except sr.ShardingConflictError:
        return
    np.testing.assert_allclose(execute(kernel, [x, y], back, outs.shape), kernel(x, y))


def test_execution_catches_a_wrong_answer() -> None:
    # Sanity of the proof machinery: a mismatched layout is rejected or computes garbage.
    x = np.arange(8.0)
    wrong = SpmdInfo([DistAttr(MESH, [0]), DistAttr(MESH, [1])], [DistAttr(MESH, [0])])
    try:
        got = execute(np.add, [x, x], wrong, (8,))
    except (ShardMismatch, ValueError):
        return
    assert not np.allclose(got, x + x)


def test_swiglu_deviation_predicate_is_narrow() -> None:
    from spmdrules.conformance.deviation import classify

    mesh = sr.ProcessMesh([[0, 1], [2, 3], [4, 5], [6, 7]])

    def case(x_dm: list[int], out_dm: list[int], absent: str = "shape0") -> dict[str, Any]:
        return {
            "op": "swiglu",
            "direction": "forward",
            "mesh": {"shape": [4, 2], "process_ids": list(range(8))},
            "inputs": [{"name": "x", "shape": [8, 6], "dims_mapping": [0, 1]},
                       {"name": "y", "shape": [0], "dims_mapping": [], "absent": absent}],
            "expected": {"inputs": [{"dims_mapping": x_dm}, {"dims_mapping": []}],
                         "outputs": [{"dims_mapping": out_dm}]},
        }

    ours = fwd("swiglu", spec([8, 6], [0, 1], mesh=mesh), None)
    assert classify(case([0, 1], [0, 1]), ours) == "swiglu-halves-replicated"
    # any other difference is not this class
    assert classify(case([-1, 1], [-1, 1]), ours) is None
    assert classify(case([0, -1], [0, -1]), ours) is None
    wrong = SpmdInfo([DistAttr(mesh, [-1, -1]), None], [DistAttr(mesh, [-1, -1])])
    assert classify(case([0, 1], [0, 1]), wrong) is None
    assert classify(case([0, 1], [0, 1]), sr.ShardingConflictError("x")) is None


def test_size1_out_deviation_predicate_is_narrow() -> None:
    from spmdrules.conformance.deviation import classify

    mesh = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])

    def case(x_dm: list[int], out_dm: list[int]) -> dict[str, Any]:
        return {
            "op": "add",
            "direction": "reverse",
            "inputs": [{"name": "x", "shape": [12], "dims_mapping": [-1]},
                       {"name": "y", "shape": [1, 1], "dims_mapping": [-1, -1]}],
            "outputs": [{"name": "out", "shape": [1, 12], "dims_mapping": [0, 1]}],
            "expected": {"inputs": [{"dims_mapping": x_dm}, {"dims_mapping": [-1, -1]}],
                         "outputs": [{"dims_mapping": out_dm}]},
        }

    ours = rev(
        "add", spec([12], [-1], mesh=mesh), spec([1, 1], [-1, -1], mesh=mesh),
        spec([1, 12], [0, 1], mesh=mesh),
    )
    assert classify(case([1], [0, 1]), ours) == "binary-reverse-size1-out-replicated"
    assert classify(case([-1], [0, 1]), ours) is None  # inputs differ too
    assert classify(case([1], [0, -1]), ours) is None  # a difference beyond size-1 dims
    assert classify({**case([1], [0, 1]), "direction": "forward"}, ours) is None

