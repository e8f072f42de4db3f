"""c_softmax_with_multi_label_cross_entropy: Paddle's behaviour, the proven deviation, and the
vocab-parallel lowering (classes sharded, reduced inside the op) with its reverse, against serial
numpy, simulated and on MPI."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.core.shards import ShardMismatch, gather, run_local
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.program import LocalStep
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.errors import ShapeError
from spmdrules.graph.graph import Graph

OP = "c_softmax_with_multi_label_cross_entropy"
MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def dm(a: Any) -> list[int]:
    return list(a.dims_mapping)


def test_class_dim_keeps_its_shard_and_the_labels_have_a_letter_of_their_own() -> None:
    # c_softmax_with_multi_label_cross_entropy/forward/0 (mesh [2,2]): x[4,4] [0,1],
    # label and smooth_weight [4,1] [0,1] -> the labels lose mesh dim 1 to x's classes
    mesh = ProcessMesh.from_shape([2, 2])
    rule = get_rule(OP)
    info = rule.infer_forward(TensorSpec([4, 4], DistAttr(mesh, [0, 1])),
                              TensorSpec([4, 1], DistAttr(mesh, [0, 1])),
                              TensorSpec([4, 1], DistAttr(mesh, [0, 1])), -1, True, 3, 4)
    assert [dm(a) for a in info.inputs] == [[0, 1], [0, -1], [0, -1]]
    assert [dm(a) for a in info.outputs] == [[0, 1], [0, -1]]
    # per-label loss: the labels' split stays, on label, smooth_weight and loss
    info = rule.infer_forward(TensorSpec([8, 6], DistAttr(mesh, [-1, 1])),
                              TensorSpec([8, 4], DistAttr(mesh, [-1, 0])),
                              TensorSpec([8, 4], DistAttr(mesh, [-1, -1])), -100, False, 0, 1)
    assert [dm(a) for a in info.inputs] == [[-1, 1], [-1, 0], [-1, 0]]
    assert [dm(a) for a in info.outputs] == [[-1, 1], [-1, 0]]


def test_typed_errors() -> None:
    rule = get_rule(OP)
    with pytest.raises(sr.RuleArgumentError, match="smooth_weight"):
        rule.infer_forward(TensorSpec([8, 4], DistAttr(MESH, [0, -1])),
                           TensorSpec([8, 2], DistAttr(MESH, [0, -1])),
                           TensorSpec([8, 3], DistAttr(MESH, [0, -1])), -100, True, 0, 1)
    with pytest.raises(sr.RuleArgumentError, match="label"):
        rule.infer_forward(TensorSpec([8, 4], DistAttr(MESH, [0, -1])),
                           TensorSpec([6, 2], DistAttr(MESH, [0, -1])),
                           TensorSpec([6, 2], DistAttr(MESH, [0, -1])), -100, True, 0, 1)
    with Graph("bad") as g:
        x = g.input("x", [4, 6], "float64")
        with pytest.raises(ShapeError, match="smooth_weight"):
            ops.c_softmax_with_multi_label_cross_entropy(
                x, g.input("label", [4, 2], "int64"), g.input("w", [4, 2], "float32"))
        with pytest.raises(ShapeError, match="label"):
            ops.c_softmax_with_multi_label_cross_entropy(
                x, g.input("l2", [4, 2], "float64"), g.input("w2", [4, 2], "float64"))


def test_the_op_carries_every_attribute() -> None:
    with Graph("attrs") as g:
        _, loss = ops.c_softmax_with_multi_label_cross_entropy(
            g.input("x", [4, 6], "float64"), g.input("label", [4, 3], "int64"),
            g.input("w", [4, 3], "float64"), ignore_index=1, sum_multi_label_loss=False,
            rank=1, nranks=2, ring_id=5)
    [op] = g.ops
    assert op.attr_dict == {"ignore_index": 1, "sum_multi_label_loss": False, "rank": 1,
                            "nranks": 2, "ring_id": 5}
    assert loss.shape == (4, 3) and loss.dtype == "float64"


def _serial_loss(x: np.ndarray, label: np.ndarray, w: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.asarray(-(w * np.take_along_axis(logp, label, axis=-1)).sum(axis=-1, keepdims=True))


def test_deviation_sum_labels_gathered_paddle_wrong_ours_right() -> None:
    # c_softmax_with_multi_label_cross_entropy/forward/31 on mesh [2,4]: x[32,12] [-1,-1],
    # label[32,4] [-1,0], smooth_weight [-1,-1], summed loss. Paddle: label and smooth_weight
    # [-1,0], loss [-1,-1] whole; ours gathers the labels.
    mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 12))
    label = rng.integers(0, 12, (32, 4))
    w = rng.random((32, 4))
    serial = _serial_loss(x, label, w)
    got = get_rule(OP).infer_forward(
        TensorSpec([32, 12], DistAttr(mesh, [-1, -1])), TensorSpec([32, 4], DistAttr(mesh, [-1, 0])),
        TensorSpec([32, 4], DistAttr(mesh, [-1, -1])), -100, True, 0, 1)
    x_a, l_a, w_a = got.inputs
    loss_a = got.outputs[1]
    assert [dm(a) for a in (x_a, l_a, w_a, loss_a)] == [[-1, -1]] * 4
    ours = run_local(lambda xb, lb, wb: (_serial_loss(xb, lb, wb),),
                     [(x, x_a), (label, l_a), (w, w_a)])
    np.testing.assert_allclose(gather({c: v[0] for c, v in ours.items()}, (32, 1), loss_a),
                               serial)
    # Paddle's attributes: every rank sums only its own block of the labels
    p_label = DistAttr(mesh, [-1, 0])
    theirs = run_local(lambda xb, lb, wb: (_serial_loss(xb, lb, wb),),
                       [(x, DistAttr(mesh, [-1, -1])), (label, p_label), (w, p_label)])
    assert not any(np.allclose(v[0], serial) for v in theirs.values())
    with pytest.raises(ShardMismatch):  # the "whole" loss differs from rank to rank
        gather({c: v[0] for c, v in theirs.items()}, (32, 1), DistAttr(mesh, [-1, -1]))


def _model(summed: bool) -> Graph:
    with Graph(f"c-softmax-multi-label-{summed}") as g:
        x = g.input("x", [4, 3, 10], "float64")
        label = g.input("label", [4, 3, 3], "int64")
        w = g.input("smooth_weight", [4, 3, 3], "float64")
        if summed:  # rows on dp, classes on mp
            shard(x, MESH, ("dp", None, "mp"))
        else:  # classes on mp, the labels of each row on dp
            shard(x, MESH, (None, None, "mp"))
            shard(label, MESH, (None, None, "dp"))
        _, loss = ops.c_softmax_with_multi_label_cross_entropy(
            x, label, w, ignore_index=3, sum_multi_label_loss=summed)
        ops.multiply(loss, loss, name="out")
    return g


def _feeds() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    return {"x": rng.standard_normal((4, 3, 10)), "label": rng.integers(0, 10, (4, 3, 3)),
            "smooth_weight": rng.random((4, 3, 3))}


@pytest.mark.parametrize("summed", [True, False])
def test_vocab_parallel_equals_serial_forward_and_reverse(summed: bool) -> None:
    g = _model(summed)
    prog = lower(complete(g))
    assert any(isinstance(i, LocalStep) for i in prog.instructions)  # the vocab-parallel lowering
    call = prog.calls[f"{OP}_0"]
    # the classes stay on mp; per label, the labels (and the loss) stay on dp too
    want = [[-1, -1, 1], [-1, -1, 0], [-1, -1, 0]] if not summed else [[0, -1, 1], [0, -1, -1],
                                                                         [0, -1, -1]]
    assert [dm(a) for a in call.input_attrs] == want
    res = run_simulated(prog, _feeds())
    err, worst = max_error(res.fetch_all(), run_serial(g, _feeds()))
    assert err <= 1e-12, f"{worst} differs by {err}"
    gp = gradient_program(prog, ["out"])
    assert {"x", "smooth_weight"} <= set(gp.grads)
    seed = {"out": np.random.default_rng(2).standard_normal(prog.buffers["out"].shape)}
    grads = run_simulated(gp, {**_feeds(), gp.seeds["out"]: seed["out"]})
    got = {t: grads.fetch(b) for t, b in gp.grads.items()}
    checks = check_gradients(g, _feeds(), seed, got, directions=2, entries=3)
    worst_check = max(checks, key=lambda c: c.error)
    assert worst_check.error <= 1e-7, worst_check


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("summed", [True, False])
def test_vocab_parallel_on_mpi_equals_serial_forward_and_reverse(summed: bool) -> None:
    g = _model(summed)
    prog = lower(complete(g))
    run = run_mpi(prog, _feeds(), nprocs=4, timeout=120)
    err, worst = max_error(run.values, run_serial(g, _feeds()))
    assert err <= 1e-12, f"{worst} differs by {err}"
    gp = gradient_program(prog, ["out"])
    seed = np.random.default_rng(2).standard_normal(prog.buffers["out"].shape)
    feeds = {**_feeds(), gp.seeds["out"]: seed}
    grads = run_mpi(gp, feeds, nprocs=4, fetch=list(gp.grads.values()), timeout=120)
    sim = run_simulated(gp, feeds)
    for b in gp.grads.values():
        np.testing.assert_allclose(grads.values[b], sim.fetch(b), rtol=1e-12, atol=1e-12)


def test_vocab_parallel_with_a_class_block_left_empty() -> None:
    # 3 classes over 4 processes: the last block holds none, yet joins every all-reduce
    mesh = ProcessMesh([0, 1, 2, 3], dim_names=["mp"])
    with Graph("empty-class-block") as g:
        x = g.input("x", [2, 3], "float64")
        shard(x, mesh, (None, "mp"))
        _, loss = ops.c_softmax_with_multi_label_cross_entropy(
            x, g.input("label", [2, 2], "int64"), g.input("smooth_weight", [2, 2], "float64"))
        ops.multiply(loss, loss, name="out")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3)), "label": rng.integers(0, 3, (2, 2)),
             "smooth_weight": rng.random((2, 2))}
    prog = lower(complete(g))
    assert dm(prog.calls[g.ops[0].name].input_attrs[0]) == [-1, 0]
    err, worst = max_error(run_simulated(prog, feeds).fetch_all(), run_serial(g, feeds))
    assert err <= 1e-12, f"{worst} differs by {err}"
    gp = gradient_program(prog, ["out"])
    seed = {"out": rng.standard_normal((2, 1))}
    grads = run_simulated(gp, {**feeds, gp.seeds["out"]: seed["out"]})
    got = {t: grads.fetch(b) for t, b in gp.grads.items()}
    worst_check = max(check_gradients(g, feeds, seed, got, directions=2, entries=3),
                      key=lambda c: c.error)
    assert worst_check.error <= 1e-7, worst_check
