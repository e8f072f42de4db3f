"""linear_v2 and fused_gemm_epilogue: Paddle's behaviour, errors, the deviation's proof, and a
model with a pending-sum gemm run sharded (simulated and MPI) against serial numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, RuleArgumentError, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated
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
    res = run_simulated(prog, feeds)
    err, worst = max_error(res.fetch_all(), run_serial(g, feeds))
    assert err <= 1e-12, f"{worst} differs by {err}"
    gp = gradient_program(prog, ["loss"])
    seed = {"loss": np.random.default_rng(2).standard_normal(prog.buffers["loss"].shape)}
    grads = run_simulated(gp, {**feeds, gp.seeds["loss"]: seed["loss"]})
    got = {t: grads.fetch(b) for t, b in gp.grads.items()}
    worst_check = max(check_gradients(g, feeds, seed, got, directions=1, entries=1),
                      key=lambda c: c.error)
    assert worst_check.error <= 1e-7, worst_check


@pytest.mark.timeout(150)
def test_a_pending_gemm_on_mpi_equals_serial() -> None:
    g = _model()
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=4)
    run = run_mpi(prog, feeds, nprocs=4, timeout=120)
    err, worst = max_error(run.values, run_serial(g, feeds))
    assert err <= 1e-12, f"{worst} differs by {err}"
    assert run.traffic.mismatches(prog) == []
