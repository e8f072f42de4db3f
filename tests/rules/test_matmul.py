"""matmul / matmul_v2 / bmm / bmm_grad: hand-written cases, Paddle's quirks, typed errors, execution
proofs of our own answers, and the deviation class in docs/deviations/matmul.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from spmdrules.rules import matmul as matmul_rules

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.conformance.calls import build_call
from spmdrules.conformance.deviation import classify
from spmdrules.conformance.runner import default_case_paths, iter_cases
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError, SpmdError
from spmdrules.core.shards import ShardMismatch, gather, run_local

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(7)

MESH2 = ProcessMesh.from_shape([2], [0, 1])
MESH4 = ProcessMesh.from_shape([4], list(range(4)))
MESH8 = ProcessMesh.from_shape([8], list(range(8)))
MESH22 = ProcessMesh.from_shape([2, 2], list(range(4)))
MESH42 = ProcessMesh.from_shape([4, 2], list(range(8)))
MESH222 = ProcessMesh.from_shape([2, 2, 2], list(range(8)))


def spec(mesh: ProcessMesh, shape: Sequence[int], dm: Sequence[Any], partial: Any = None) -> TensorSpec:
    if any(isinstance(d, list) for d in dm):
        mdm = [d if isinstance(d, list) else ([] if d == -1 else [d]) for d in dm]
        return TensorSpec(list(shape), DistAttr(mesh, partial=partial, multi_dims_mapping=mdm))
    return TensorSpec(list(shape), DistAttr(mesh, list(dm), partial))


def strs(info: SpmdInfo) -> tuple[list[str], list[str]]:
    return (
        [a.mapping_str() for a in info.inputs if isinstance(a, DistAttr)],
        [a.mapping_str() for a in info.outputs if isinstance(a, DistAttr)],
    )


def attrs_of(slots: Sequence[Any]) -> list[DistAttr]:
    assert all(isinstance(a, DistAttr) for a in slots)
    return list(slots)


def mm(*args: Any, op: str = "matmul") -> tuple[list[str], list[str]]:
    return strs(get_rule(op).infer_forward(*args))


def mm_paddle(*args: Any) -> tuple[list[str], list[str]]:
    """Paddle's policy for uneven batch letters and k (replicate them), kept in the rule to
    recognise its answers; ours keeps them (deviation matmul-keeps-uneven-shard)."""
    return strs(matmul_rules.matmul_forward(*args, even=True))


# ---- forward: notation, co-shard, priorities, divisibility, partials -----------------------------
def test_contracted_dim_sharded_gives_sum_partial() -> None:
    # matmul/forward/2
    assert mm(spec(MESH2, [6, 16], [-1, 0]), spec(MESH2, [16, 12], [0, -1]), False, False) == (
        ["[-1,0]", "[0,-1]"], ["[-1,-1] P{0:sum}"])
    # the replicated operand takes the contracted sharding
    assert mm(spec(MESH22, [8, 16], [-1, 0]), spec(MESH22, [16, 32], [-1, -1]), False, False) == (
        ["[-1,0]", "[0,-1]"], ["[-1,-1] P{0:sum}"])


def test_quirk_a2_contracted_dim_is_co_sharded() -> None:
    # matmul/forward/133: k on mesh 0 in x and mesh 2 in y -> split over both, in the order met
    assert mm(spec(MESH222, [16, 8], [-1, 0]), spec(MESH222, [8, 4], [2, -1]), False, False) == (
        ["[-1,[0,2]]", "[[0,2],-1]"], ["[-1,-1] P{0:sum,2:sum}"])


def test_quirk_a2_bmm_batch_is_co_sharded() -> None:
    # bmm/forward/102
    assert mm(spec(MESH222, [8, 16, 32], [2, -1, -1]), spec(MESH222, [8, 32, 4], [1, -1, -1]),
              op="bmm") == (["[[2,1],-1,-1]", "[[2,1],-1,-1]"], ["[[2,1],-1,-1]"])


def test_co_shard_puts_the_larger_mesh_dim_first() -> None:
    # probed on Paddle 3.3.1: on a [4, 2] mesh the size-4 mesh dim is the major one
    assert mm(spec(MESH42, [8, 4, 4], [1, -1, -1]), spec(MESH42, [8, 4, 4], [0, -1, -1]),
              False, False)[1] == ["[[0,1],-1,-1]"]


def test_co_shard_that_does_not_divide() -> None:
    # Paddle: k = 12 over [4, 2]: 8 does not divide 12, 4 does (probed on Paddle 3.3.1) ...
    args = (spec(MESH42, [8, 12], [-1, 0]), spec(MESH42, [12, 8], [1, -1]), False, False)
    assert mm_paddle(*args) == (["[-1,0]", "[0,-1]"], ["[-1,-1] P{0:sum}"])
    # ... ours keeps the whole co-shard: uneven k blocks still sum to the product
    assert mm(*args) == (["[-1,[0,1]]", "[[0,1],-1]"], ["[-1,-1] P{0:sum,1:sum}"])
    check_matmul(get_rule("matmul").infer_forward(*args), (8, 12), (12, 8), False, False)
    # k = 6: neither 8 nor 4 divides it -> Paddle replicates
    args = (spec(MESH42, [8, 6], [-1, 0]), spec(MESH42, [6, 8], [1, -1]), False, False)
    assert mm_paddle(*args) == (["[-1,-1]", "[-1,-1]"], ["[-1,-1]"])
    assert mm(*args) == (["[-1,[0,1]]", "[[0,1],-1]"], ["[-1,-1] P{0:sum,1:sum}"])
    check_matmul(get_rule("matmul").infer_forward(*args), (8, 6), (6, 8), False, False)


def test_quirk_a4_mesh_dim_priorities() -> None:
    # m and n on one mesh dim: the larger wins (n here), m on a tie
    assert mm(spec(MESH22, [8, 16], [0, -1]), spec(MESH22, [16, 32], [-1, 0]), False, False) == (
        ["[-1,-1]", "[-1,0]"], ["[-1,0]"])
    assert mm(spec(MESH2, [32, 16], [0, -1]), spec(MESH2, [16, 8], [-1, 0]), False, False)[1] == [
        "[0,-1]"]
    assert mm(spec(MESH2, [8, 16], [0, -1]), spec(MESH2, [16, 8], [-1, 0]), False, False)[1] == [
        "[0,-1]"]
    # m and k: the free dim wins, k yields (its mesh dim is then not partial)
    assert mm(spec(MESH22, [8, 16], [0, -1]), spec(MESH22, [16, 32], [0, -1]), False, False) == (
        ["[0,-1]", "[-1,-1]"], ["[0,-1]"])
    # a batch dim beats m, n and k
    assert mm(spec(MESH2, [4, 8, 16], [-1, 0, -1]), spec(MESH2, [4, 16, 8], [0, -1, -1]),
              False, False)[1] == ["[0,-1,-1]"]


def test_co_sharded_batch_beats_free_dims_but_not_a_plain_batch_dim() -> None:
    # matmul/forward/224: batch contested by x (1) and y (0) takes both, n loses mesh 1
    assert mm(spec(MESH42, [8, 1, 10], [1, -1, 0]), spec(MESH42, [8, 10, 4], [0, -1, 1]),
              False, False)[1] == ["[[0,1],-1,-1]"]
    # a batch dim only y shards keeps its mesh dim; the contested one gets what is left
    assert mm(spec(MESH22, [4, 4, 8, 16], [0, -1, -1, -1]),
              spec(MESH22, [4, 4, 16, 8], [1, 0, -1, -1]), False, False)[1] == ["[1,0,-1,-1]"]


def test_quirk_b8_divisibility_checked_on_the_contracted_dim_only() -> None:
    args = (spec(MESH22, [8, 5], [0, 1]), spec(MESH22, [5, 3], [-1, -1]), False, False)
    assert mm_paddle(*args) == (["[0,-1]", "[-1,-1]"], ["[0,-1]"])
    assert mm(*args) == (["[0,1]", "[1,-1]"], ["[0,-1] P{1:sum}"])  # ours keeps uneven k
    check_matmul(get_rule("matmul").infer_forward(*args), (8, 5), (5, 3), False, False)
    assert mm(spec(MESH22, [7, 16], [0, 1]), spec(MESH22, [16, 3], [-1, -1]), False, False) == (
        ["[0,1]", "[1,-1]"], ["[0,-1] P{1:sum}"])


def test_batch_dims_must_divide_and_size_one_dims_are_replicated_in_inputs() -> None:
    # matmul/forward/39: batch 3 over 2 is dropped by Paddle, kept by ours
    args = (spec(MESH22, [3, 4, 4, 4], [1, -1, -1, 0]), spec(MESH22, [4, 12], [-1, -1]), False,
            False)
    assert mm_paddle(*args) == (["[-1,-1,-1,0]", "[0,-1]"], ["[-1,-1,-1,-1] P{0:sum}"])
    assert mm(*args) == (["[1,-1,-1,0]", "[0,-1]"], ["[1,-1,-1,-1] P{0:sum}"])
    check_matmul(get_rule("matmul").infer_forward(*args), (3, 4, 4, 4), (4, 12), False, False)
    # matmul/forward/36: x's m has size 1 -> replicated in x, n takes the mesh dim; Paddle also
    # drops k = 8 over 3, which ours keeps
    mesh23 = ProcessMesh.from_shape([2, 3], list(range(6)))
    args = (spec(mesh23, [1, 1, 8], [-1, 0, 1]), spec(mesh23, [4, 8], [0, 1]), False, True)
    assert mm_paddle(*args) == (["[-1,-1,-1]", "[0,-1]"], ["[-1,-1,0]"])
    assert mm(*args) == (["[-1,-1,1]", "[0,1]"], ["[-1,-1,0] P{1:sum}"])
    check_matmul(get_rule("matmul").infer_forward(*args), (1, 1, 8), (4, 8), False, True)


def test_trans_flags_swap_the_last_two_dims() -> None:
    # matmul/forward/4: x^T is [8, 4] with m on 1, y^T is [8, 4, 6] with batch 0
    mesh = MESH22
    assert mm(spec(mesh, [4, 8], [0, 1]), spec(mesh, [8, 6, 4], [0, -1, 1]), True, True) == (
        ["[-1,1]", "[0,-1,-1]"], ["[0,1,-1]"])


def test_vectors() -> None:
    assert mm(spec(MESH2, [24], [0]), spec(MESH2, [24], [0]), False, False) == (
        ["[0]", "[0]"], ["[] P{0:sum}"])
    assert mm(spec(MESH4, [64], [-1]), spec(MESH4, [64, 8], [-1, 0]), False, False) == (
        ["[-1]", "[-1,0]"], ["[0]"])


def test_quirk_c11_input_partials_are_dropped() -> None:
    assert mm(spec(MESH22, [3, 16], [0, -1], [1]), spec(MESH22, [16, 5], [-1, -1]), False,
              False) == (["[0,-1]", "[-1,-1]"], ["[0,-1]"])


# ---- reverse ----------------------------------------------------------------------------------------
def test_reverse_reads_inputs_off_the_output() -> None:
    # matmul/reverse/1: the batch of out is not x's (x has 3 dims, y 2)
    info = get_rule("matmul").infer_reverse(
        spec(MESH42, [12, 7, 3], [-1, 1, 0]), spec(MESH42, [3, 4], [0, 1]),
        spec(MESH42, [12, 7, 4], [-1, -1, 1]), False, False)
    assert strs(info) == (["[-1,-1,-1]", "[-1,1]"], ["[-1,-1,1]"])


def test_reverse_keeps_uneven_output_shardings() -> None:
    # matmul/reverse/37: batch 7 over 4 and m 3 over 2 do not divide: Paddle drops them
    args = (spec(MESH42, [7, 3, 10], [1, -1, 0]), spec(MESH42, [10, 2], [1, 0]),
            spec(MESH42, [7, 3, 2], [0, 1, -1]), False, False)
    assert strs(matmul_rules.matmul_reverse(*args, even=True))[0] == ["[-1,-1,-1]", "[-1,-1]"]
    info = get_rule("matmul").infer_reverse(*args)
    assert strs(info) == (["[0,1,-1]", "[-1,-1]"], ["[0,1,-1]"])
    check_matmul(info, (7, 3, 10), (10, 2), False, False)


def test_quirk_d21_reverse_needs_out_rank_of_the_larger_operand() -> None:
    with pytest.raises(RuleArgumentError, match=r"matmul: 'out' has rank 3 .* rank .* = 4"):
        get_rule("matmul").infer_reverse(
            spec(MESH22, [2, 9, 4, 5], [-1, 0, 1, -1]), spec(MESH22, [5], [-1]),
            spec(MESH22, [2, 9, 4], [0, 1, -1]), False, False)


# ---- typed errors -------------------------------------------------------------------------------------
def test_shape_errors_name_the_tensor_and_dim() -> None:
    with pytest.raises(RuleArgumentError, match=r"matmul: the contracted dim of 'x' has size 16 but "
                       r"'y' dim 0 has size 8"):
        mm(spec(MESH2, [4, 16], [-1, -1]), spec(MESH2, [8, 4], [-1, -1]), False, False)
    with pytest.raises(RuleArgumentError, match=r"do not broadcast"):
        mm(spec(MESH2, [3, 4, 16], [-1, -1, -1]), spec(MESH2, [5, 16, 4], [-1, -1, -1]), False,
           False)
    with pytest.raises(RuleArgumentError, match=r"trans_x=True needs 'x' of rank >= 2"):
        mm(spec(MESH2, [16], [-1]), spec(MESH2, [16, 4], [-1, -1]), True, False)
    with pytest.raises(RuleArgumentError, match=r"rank >= 1"):
        mm(spec(MESH2, [], []), spec(MESH2, [4], [-1]), False, False)
    with pytest.raises(RuleArgumentError, match=r"bmm: 'x' must be a 3-D"):
        mm(spec(MESH2, [4, 4], [-1, -1]), spec(MESH2, [4, 4, 4], [-1, -1, -1]), op="bmm")
    with pytest.raises(RuleArgumentError, match=r"bmm: 'x' has batch size 4 but 'y' has 2"):
        mm(spec(MESH2, [4, 4, 4], [-1, -1, -1]), spec(MESH2, [2, 4, 4], [-1, -1, -1]), op="bmm")


def test_bmm_grad_refuses_when_the_two_products_disagree() -> None:
    # bmm/reverse/4: Paddle "(Unavailable) The matmul grad infer spmd `no trans: dx-y` verify error"
    mesh = ProcessMesh.from_shape([1, 4], list(range(4)))
    with pytest.raises(ShardingConflictError, match=r"bmm_grad: the gradient products disagree on "
                       r"the layout of 'y'"):
        get_rule("bmm_grad").infer_forward(
            spec(mesh, [32, 4, 8], [-1, 1, 0]), spec(mesh, [32, 8, 5], [-1, -1, -1]),
            spec(mesh, [32, 4, 5], [1, -1, -1]))


def test_bmm_grad_layout() -> None:
    # bmm/reverse/3: dx = g @ y^T contracts n (mesh 2) -> x_grad partial on 2
    info = get_rule("bmm_grad").infer_forward(
        spec(MESH222, [4, 4, 24], [1, -1, -1]), spec(MESH222, [4, 24, 16], [1, -1, 2]),
        spec(MESH222, [4, 4, 16], [1, -1, 2]))
    assert strs(info) == (["[1,-1,-1]", "[1,-1,2]", "[1,-1,2]"],
                          ["[1,-1,-1] P{2:sum}", "[1,-1,2]"])


# ---- execution: our answers compute the product ------------------------------------------------------
def _trans(a: Array, t: bool) -> Array:
    return np.swapaxes(a, -1, -2) if t else a


def check_matmul(info: SpmdInfo, xs: Sequence[int], ys: Sequence[int], tx: bool, ty: bool) -> None:
    x, y = RNG.standard_normal(tuple(xs)), RNG.standard_normal(tuple(ys))
    xa, ya = info.inputs
    (oa,) = info.outputs
    assert isinstance(xa, DistAttr) and isinstance(ya, DistAttr) and isinstance(oa, DistAttr)
    want = np.matmul(_trans(x, tx), _trans(y, ty))
    blocks = run_local(
        lambda a, b: np.matmul(_trans(a, tx), _trans(b, ty)), [(x, xa), (y, ya)])
    np.testing.assert_allclose(gather(blocks, want.shape, oa), want, atol=1e-9)


def _forward_cases(op: str, limit: int) -> list[dict[str, Any]]:
    out = []
    for case in iter_cases(default_case_paths(), ops=[op]):
        if case["direction"] == "forward" and "error" not in case["expected"]:
            out.append(case)
    return out[:limit]


@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_our_forward_answers_execute_correctly(op: str) -> None:
    # Every rank combination, co-shard and priority the recorded cases exercise.
    n = 0
    for case in _forward_cases(op, 400):
        name, _, args, attrs = build_call(case)
        info = get_rule(name).infer_forward(*args, **attrs)
        check_matmul(info, args[0].shape, args[1].shape, attrs.get("trans_x", False),
                     attrs.get("trans_y", False))
        n += 1
    assert n > 150


def test_bmm_grad_answers_execute_correctly() -> None:
    n = 0
    for case in iter_cases(default_case_paths(), ops=["bmm"]):
        if case["direction"] != "reverse" or "error" in case["expected"]:
            continue
        _, _, args, _ = build_call(case)
        x_t, y_t, g_t = args
        info = get_rule("bmm_grad").infer_forward(*args)
        xa, ya, ga = attrs_of(info.inputs)
        dxa, dya = attrs_of(info.outputs)
        x, y = RNG.standard_normal(x_t.shape), RNG.standard_normal(y_t.shape)
        g = RNG.standard_normal(g_t.shape)
        dx = run_local(lambda gb, yb: gb @ np.swapaxes(yb, 1, 2), [(g, ga), (y, ya)])
        dy = run_local(lambda xb, gb: np.swapaxes(xb, 1, 2) @ gb, [(x, xa), (g, ga)])
        np.testing.assert_allclose(gather(dx, x.shape, dxa),
                                   g @ np.swapaxes(y, 1, 2), atol=1e-9)
        np.testing.assert_allclose(gather(dy, y.shape, dya),
                                   np.swapaxes(x, 1, 2) @ g, atol=1e-9)
        n += 1
    assert n > 50


# ---- deviation: matmul-internal-length-error -----------------------------------------------------------
def test_proof_matmul_internal_length_error() -> None:
    # matmul/forward/74, mesh [4, 2]: Paddle throws "vector::_M_fill_insert" (std::length_error).
    x, y = spec(MESH42, [1, 16, 16], [0, 1, -1]), spec(MESH42, [6, 4, 16, 6], [-1, -1, 1, 0])
    info = get_rule("matmul").infer_forward(x, y, False, False)
    assert strs(info) == (["[-1,1,-1]", "[-1,0,-1,-1]"], ["[-1,0,1,-1]"])
    check_matmul(info, x.shape, y.shape, False, False)
    case = {"op": "matmul", "direction": "forward",
            "expected": {"error": "vector::_M_fill_insert", "error_type": "ValueError"}}
    assert classify(case, info) == "matmul-internal-length-error"
    assert classify(case, SpmdError("x")) is None


# ---- deviation: matmul-size-one-output-shard -----------------------------------------------------------
def test_proof_size_one_output_shard() -> None:
    # matmul/forward/117, mesh [2,2,2]: x[1,8]dm[2,-1] @ y[8,9] P{1}. Paddle: x [-1,-1], y [-1,-1],
    # out [2,-1]: every coordinate computes the whole [1, 9] product from replicated operands, but
    # out [2,-1] says coordinates with mesh-2 index 1 hold an empty block.
    x, y = spec(MESH222, [1, 8], [2, -1]), spec(MESH222, [8, 9], [-1, -1], [1])
    info = get_rule("matmul").infer_forward(x, y, False, False)
    assert strs(info) == (["[-1,-1]", "[-1,-1]"], ["[-1,-1]"])
    xv, yv = RNG.standard_normal((1, 8)), RNG.standard_normal((8, 9))
    xa, ya = info.inputs
    assert isinstance(xa, DistAttr) and isinstance(ya, DistAttr)
    blocks = run_local(np.matmul, [(xv, xa), (yv, ya)])
    with pytest.raises(ShardMismatch, match="expected"):
        gather(blocks, (1, 9), DistAttr(MESH222, [2, -1]))
    check_matmul(info, (1, 8), (8, 9), False, False)
    case: dict[str, Any] = {
            "op": "matmul", "direction": "forward",
            "inputs": [{"shape": [1, 8], "dims_mapping": [2, -1]},
                       {"shape": [8, 9], "dims_mapping": [-1, -1], "partial": {"1": "sum"}}],
            "mesh": {"shape": [2, 2, 2], "process_ids": list(range(8))},
            "attrs": {"trans_x": False, "trans_y": False},
            "expected": {"inputs": [{"dims_mapping": [-1, -1]}, {"dims_mapping": [-1, -1]}],
                         "outputs": [{"dims_mapping": [2, -1], "partial": {}}]}}
    assert classify(case, info) == "matmul-size-one-output-shard"
    case["expected"]["outputs"][0]["dims_mapping"] = [-1, 0]  # not a size-1 dim: not explained
    assert classify(case, info) is None


# ---- deviation: matmul-reverse-out ---------------------------------------------------------------------
def test_proof_reverse_out() -> None:
    # matmul/reverse/5, mesh [8]: out[8,2,10] [-1,-1,0]; n = 10 does not divide over 8, so
    # Paddle replicates y and returns out [-1,-1,0] as given: every coordinate computes the whole
    # product, which is not that layout. Ours keeps the uneven n (keeps-uneven-shard), and the
    # given out is then what the operands produce.
    x, y = spec(MESH8, [8, 2, 16], [-1, -1, 0]), spec(MESH8, [8, 16, 10], [-1, -1, 0])
    out = spec(MESH8, [8, 2, 10], [-1, -1, 0])
    paddle = matmul_rules.matmul_reverse(x, y, out, False, False, even=True)
    assert strs(paddle)[0] == ["[-1,-1,-1]", "[-1,-1,-1]"]
    xv, yv = RNG.standard_normal((8, 2, 16)), RNG.standard_normal((8, 16, 10))
    xa, ya = attrs_of(paddle.inputs)
    blocks = run_local(np.matmul, [(xv, xa), (yv, ya)])
    with pytest.raises(ShardMismatch):
        gather(blocks, (8, 2, 10), out.attr)
    info = get_rule("matmul").infer_reverse(x, y, out, False, False)
    assert strs(info) == (["[-1,-1,-1]", "[-1,-1,0]"], ["[-1,-1,0]"])
    check_matmul(info, x.shape, y.shape, False, False)
    # matmul/reverse/109 with n = 6: a partial out cannot come from operands whose k is replicated
    mesh = MESH222
    info = get_rule("matmul").infer_reverse(
        spec(mesh, [32, 8], [-1, 1], [2]), spec(mesh, [8, 6], [1, 2]),
        spec(mesh, [32, 6], [-1, 2], [0]), False, False)
    assert strs(info) == (["[-1,-1]", "[-1,2]"], ["[-1,2]"])
    check_matmul(info, (32, 8), (8, 6), False, False)
    case: dict[str, Any] = {
        "op": "matmul", "direction": "reverse", "reverse_kind": "reverse",
        "mesh": {"shape": [2, 2, 2], "process_ids": list(range(8))},
        "attrs": {"trans_x": False, "trans_y": False},
        "inputs": [{"shape": [32, 8], "dims_mapping": [-1, 1], "partial": {"2": "sum"}},
                   {"shape": [8, 6], "dims_mapping": [1, 2]}],
        "outputs": [{"shape": [32, 6], "dims_mapping": [-1, 2], "partial": {"0": "sum"}}],
        "expected": {"inputs": [{"dims_mapping": [-1, -1]}, {"dims_mapping": [-1, 2]}],
                     "outputs": [{"dims_mapping": [-1, 2], "partial": {"0": "sum"}}]}}
    assert classify(case, info) == "matmul-reverse-out"
    case["expected"]["inputs"][1]["dims_mapping"] = [1, 2]  # other operands: not explained
    assert classify(case, info) is None


def test_latency_is_lean() -> None:
    # The benchmark shape; generous bound, the point is no pathological slowness.
    import timeit

    mesh = ProcessMesh.from_shape([2, 4], list(range(8)))
    rule = get_rule("matmul")
    x, y = spec(mesh, [4, 1024, 512], [0, -1, 1]), spec(mesh, [512, 2048], [1, -1])

    def call() -> None:
        rule.cache_clear()
        rule.infer_forward(x, y, False, False)

    assert min(timeit.repeat(call, number=200, repeat=3)) / 200 < 1e-3
