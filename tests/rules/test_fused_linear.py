"""linear_v2 and fused_gemm_epilogue: Paddle's behaviour, errors, the deviation's proof, and a
model with a pending-sum gemm run sharded (simulated and MPI) against serial numpy."""

from __future__ import annotations

from typing import Any

import pytest
from proofs import execute
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial
from spmdrules.rules import fused_linear

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, RuleArgumentError, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.conformance.runner import run_case
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: list[int], dm: list[int], partial: Any = None, mesh: ProcessMesh = MESH
         ) -> TensorSpec:
    return TensorSpec(shape, DistAttr(mesh, dm, partial))


def dms(slots: Any) -> list[Any]:
    return [None if a is None else list(a.dims_mapping) for a in slots]


def test_gemm_keeps_k_and_makes_out_and_bias_pending_sums() -> None:
    # fused_gemm_epilogue/forward/0 (mesh [2]): x [8,6] dm [-1,0] @ y [6,12]
    m1 = ProcessMesh([0, 1])
    info = get_rule("fused_gemm_epilogue").infer_forward(
        spec([8, 6], [-1, 0], mesh=m1), spec([6, 12], [-1, -1], mesh=m1),
        spec([12], [-1], mesh=m1), False, False)
    assert dms(info.inputs) == [[-1, 0], [0, -1], [-1]]
    assert info.inputs[2].partial_items == ((0, "sum"),)  # type: ignore[union-attr]
    assert info.outputs[0].partial_items == ((0, "sum"),)  # type: ignore[union-attr]
    assert info.outputs[1].ndim == 0  # type: ignore[union-attr]
    # an activation needs the complete sum: k is gathered
    info = get_rule("fused_gemm_epilogue").infer_forward(
        spec([8, 6], [-1, 0], mesh=m1), spec([6, 12], [-1, -1], mesh=m1),
        spec([12], [-1], mesh=m1), False, False, "relu")
    assert dms(info.inputs) == [[-1, -1], [-1, -1], [-1]] and not info.outputs[0].partial_items  # type: ignore[union-attr]


def test_linear_v2_replicates_the_matrix_letters_where_k_stays_sharded() -> None:
    # linear_v2/forward/1: x [4,9,10] dm [0,-1,1], weight [10,2] dm [-1,1]: k wins mesh dim 1
    info = get_rule("linear_v2").infer_forward(spec([4, 9, 10], [0, -1, 1]),
                                               spec([10, 2], [-1, 1]), None, False)
    assert dms(info.inputs) == [[0, -1, -1], [-1, -1], None]
    assert dms(info.outputs) == [[0, -1, -1], []]
    info = get_rule("linear_v2").infer_forward(spec([4, 8], [0, -1]), spec([8, 6], [-1, 1]),
                                               spec([6], [-1]), False)
    assert dms(info.inputs) == [[0, -1], [-1, 1], [1]] and dms(info.outputs)[0] == [0, 1]


def test_errors_are_typed() -> None:
    with pytest.raises(RuleArgumentError, match="transpose_weight"):
        get_rule("linear_v2").infer_forward(spec([4, 8], [0, -1]), spec([8, 6], [-1, -1]),
                                            None, True)
    with pytest.raises(RuleArgumentError, match="ndim of bias should be 1"):
        get_rule("linear_v2").infer_forward(spec([4, 8], [0, -1]), spec([8, 6], [-1, -1]),
                                            spec([], []), False)
    with pytest.raises(sr.ShardingConflictError):
        get_rule("fused_gemm_epilogue").infer_forward(
            spec([8, 6], [-1, 0]), spec([6, 4], [1, -1]), spec([4], [-1]), False, False)
    with pytest.raises(RuleArgumentError, match="activation"):
        get_rule("fused_gemm_epilogue").infer_forward(
            spec([8, 6], [-1, -1]), spec([6, 4], [-1, -1]), spec([4], [-1]), False, False, "tanh")


def test_deviation_size_one_output_shard_paddle_wrong_ours_right() -> None:
    # linear_v2/forward/33 (mesh [4]): x [1,16] dm [0,-1] @ weight [16,6] dm [-1,0]
    mesh = ProcessMesh([0, 1, 2, 3])
    args = (spec([1, 16], [0, -1], mesh=mesh), spec([16, 6], [-1, 0], mesh=mesh),
            spec([6], [0], mesh=mesh))
    attrs = {"transpose_weight": False}
    ours = get_rule("linear_v2").infer_forward(*args, **attrs)
    assert dms(ours.outputs)[0] == [-1, -1]
    assert execute("linear_v2", args, ours, attrs) == "ok"
    rep = DistAttr(mesh, [-1, -1])
    paddle = sr.SpmdInfo((rep, rep, DistAttr(mesh, [-1])), (DistAttr(mesh, [0, -1]), DistAttr(mesh, [])))
    assert execute("linear_v2", args, paddle, attrs) == "wrong"


def test_a_size_one_n_shared_with_the_bias_keeps_its_shard_as_paddle() -> None:
    # fused_gemm_epilogue/forward/72 (mesh [4,2]): x [8,8] @ y^T, y [1,8] dm [1,0]
    mesh = ProcessMesh.from_shape([4, 2])
    args = (spec([8, 8], [-1, -1], mesh=mesh), spec([1, 8], [1, 0], mesh=mesh),
            spec([1], [-1], mesh=mesh))
    attrs = {"trans_x": False, "trans_y": True, "activation": "none"}
    ours = get_rule("fused_gemm_epilogue").infer_forward(*args, **attrs)
    assert dms(ours.outputs)[0] == [-1, 1] and dms(ours.inputs)[2] == [1]
    assert execute("fused_gemm_epilogue", args, ours, attrs) == "ok"


def _audit_case() -> tuple[tuple[TensorSpec, ...], dict[str, Any]]:
    """Issue 23 item 10: x [12,1] and y [3,1] (trans_y) given k split on a 1-D mesh of 4, the
    bias [3] given [0]."""
    mesh = ProcessMesh([0, 1, 2, 3])
    return ((spec([12, 1], [-1, 0], mesh=mesh), spec([3, 1], [-1, 0], mesh=mesh),
             spec([3], [0], mesh=mesh)),
            {"trans_x": False, "trans_y": True, "activation": "none"})


def test_deviation_size_one_k_pending_paddle_wrong_ours_right() -> None:
    """k of size 1 has nothing to split: x and y are replicated and every process computes the
    whole product. Paddle (and our rule on af95ee8) marked the output and the bias pending sums
    over mesh dim 0, which sums the product 4 times."""
    args, attrs = _audit_case()
    ours = get_rule("fused_gemm_epilogue").infer_forward(*args, **attrs)
    assert dms(ours.inputs) == [[-1, -1], [-1, -1], [-1]]
    assert [a.partial_items for a in (*ours.inputs, ours.outputs[0])] == [(), (), (), ()]  # type: ignore[union-attr]
    assert execute("fused_gemm_epilogue", args, ours, attrs) == "ok"
    paddle = fused_linear.fused_gemm_epilogue_forward(*args, **attrs, merged_k=True)
    assert paddle.outputs[0].partial_items == ((0, "sum"),)  # type: ignore[union-attr]
    assert paddle.inputs[2].partial_items == ((0, "sum"),)  # type: ignore[union-attr]
    assert execute("fused_gemm_epilogue", args, paddle, attrs) == "wrong"


def test_the_size_one_k_class_files_paddle_s_answer() -> None:
    """The audit's case as a conformance record with Paddle's answer goes to its class."""
    args, attrs = _audit_case()

    def entry(a: DistAttr) -> dict[str, Any]:
        return {"dims_mapping": list(a.dims_mapping),
                "partial": {str(d): rt for d, rt in a.partial_items}}

    paddle = fused_linear.fused_gemm_epilogue_forward(*args, **attrs, merged_k=True)
    case = {"op": "fused_gemm_epilogue", "direction": "forward", "case_id": "audit/item10",
            "mesh": {"shape": [4], "process_ids": [0, 1, 2, 3]},
            "inputs": [{"name": n, "shape": list(t.shape), "dims_mapping": list(t.attr.dims_mapping),
                        "partial": {}} for n, t in zip(("x", "y", "bias"), args, strict=True)],
            "attrs": attrs, "expected": {"inputs": [entry(a) for a in paddle.inputs],  # type: ignore[arg-type]
                                         "outputs": [entry(a) for a in paddle.outputs]}}  # type: ignore[arg-type]
    result = run_case(case)
    assert result.verdict == "disagree" and result.deviation == "fused-gemm-size-one-k-pending"


def test_param_grad_add_sums_rows_into_pending_sums() -> None:
    m1 = ProcessMesh([0, 1])
    info = get_rule("fused_linear_param_grad_add").infer_forward(
        spec([32, 2], [0, -1], mesh=m1), spec([32, 24], [-1, -1], mesh=m1), None, None,
        False, True)
    assert dms(info.inputs)[:2] == [[0, -1], [0, -1]]
    assert [a.partial_items for a in info.outputs] == [((0, "sum"),), ((0, "sum"),)]  # type: ignore[union-attr]
    with pytest.raises(RuleArgumentError, match="'dbias' is laid out"):
        get_rule("fused_linear_param_grad_add").infer_forward(
            spec([32, 2], [0, -1], mesh=m1), spec([32, 24], [-1, -1], mesh=m1), None,
            spec([24], [-1], mesh=m1), False, True)


def test_deviation_bias_grad_of_given_dout_paddle_wrong_ours_right() -> None:
    # fused_linear_param_grad_add/forward/26 (mesh [2]): x [32,2] dm [0,-1], dout [32,24]
    # replicated, dbias [24] replicated: Paddle answers dout [0,-1] but a complete bias gradient
    m1 = ProcessMesh([0, 1])
    args = (spec([32, 2], [0, -1], mesh=m1), spec([32, 24], [-1, -1], mesh=m1), None, None)
    attrs = {"multi_precision": False, "has_bias": True}
    ours = get_rule("fused_linear_param_grad_add").infer_forward(*args, **attrs)
    assert execute("fused_linear_param_grad_add", args, ours, attrs) == "ok"
    paddle = sr.SpmdInfo(ours.inputs, (ours.outputs[0], DistAttr(m1, [-1])))
    assert execute("fused_linear_param_grad_add", args, paddle, attrs) == "wrong"


def test_a_given_accumulator_in_paddle_s_layout_is_taken() -> None:
    """Issue 23 item 15, fused_linear_param_grad_add/forward/102 (mesh [1,2,4]): our policy keeps
    x's 6 rows split over 4 (a pending sum), so the complete dweight [-1,1] given was refused;
    with the rows gathered (Paddle's policy) the gradient is that complete [-1,1], which Paddle
    answers and which executes. The rule now takes it."""
    mesh = ProcessMesh.from_shape([1, 2, 4])
    args = (spec([6, 6], [2, 1], mesh=mesh), spec([6, 7], [2, 1], mesh=mesh),
            spec([6, 7], [-1, 1], mesh=mesh), None)
    attrs = {"multi_precision": False, "has_bias": False}
    ours = get_rule("fused_linear_param_grad_add").infer_forward(*args, **attrs)
    assert dms(ours.inputs) == [[-1, -1], [-1, 1], [-1, 1], None]
    assert dms(ours.outputs) == [[-1, 1], []] and not ours.outputs[0].partial_items  # type: ignore[union-attr]
    assert execute("fused_linear_param_grad_add", args, ours, attrs) == "ok"
    # without an accumulator the rows keep their (uneven) split: a pending sum
    free = get_rule("fused_linear_param_grad_add").infer_forward(*args[:2], None, None, **attrs)
    assert free.outputs[0].partial_items == ((2, "sum"),)  # type: ignore[union-attr]
    assert execute("fused_linear_param_grad_add", (*args[:2], None, None), free, attrs) == "ok"
    # an accumulator neither layout produces is still refused, naming the layout to give
    with pytest.raises(RuleArgumentError, match="'dweight' is laid out"):
        get_rule("fused_linear_param_grad_add").infer_forward(
            *args[:2], spec([6, 7], [1, -1], mesh=mesh), None, **attrs)


def test_a_complete_dbias_paddle_refuses_is_taken_with_the_rows_gathered() -> None:
    """fused_linear_param_grad_add/forward/54 (mesh [2]): x [5,2] and dout [5,6] rows split
    unevenly, dbias [6] complete. Paddle reads the bias gradient off the given dout (rows split:
    pending) and refuses; with the rows gathered the gradients are complete and take the dbias."""
    m1 = ProcessMesh([0, 1])
    args = (spec([5, 2], [0, -1], mesh=m1), spec([5, 6], [0, -1], mesh=m1), None,
            spec([6], [-1], mesh=m1))
    attrs = {"multi_precision": False, "has_bias": True}
    ours = get_rule("fused_linear_param_grad_add").infer_forward(*args, **attrs)
    assert dms(ours.inputs)[:2] == [[-1, -1], [-1, -1]]
    assert not any(a.partial_items for a in ours.outputs)  # type: ignore[union-attr]
    assert execute("fused_linear_param_grad_add", args, ours, attrs) == "ok"


def _model() -> Graph:
    with Graph("fused-linear") as g:
        x = g.input("x", [6, 8], "float64")
        shard(x, MESH, ("dp", "mp"))
        w1, b1 = g.input("w1", [8, 5], "float64"), g.input("b1", [5], "float64")
        w2, b2 = g.input("w2", [5, 4], "float64"), g.input("b2", [4], "float64")
        h, _ = ops.fused_gemm_epilogue(x, w1, b1)  # k on mp: a pending sum, bias too
        h, _ = ops.fused_gemm_epilogue(h, w2, b2, activation="relu")
        y, _ = ops.linear_v2(h, w2.graph.input("w3", [4, 3], "float64"), None)
        ops.multiply(y, y, name="loss")
    return g


def test_a_pending_gemm_sharded_equals_serial_forward_and_reverse() -> None:
    g = _model()
    r = complete(g)
    assert r.attr(g.tensor("fused_gemm_epilogue_0.out")).partial_items == ((1, "sum"),)  # type: ignore[union-attr]
    prog = lower(r)
    feeds = random_feeds(prog, seed=4)
    assert_simulated_equals_serial(g, feeds, prog=prog)


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_a_pending_gemm_on_mpi_equals_serial() -> None:
    g = _model()
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=4)
    assert_mpi_equals_serial(g, feeds, prog=prog)
