"""c_softmax_with_cross_entropy: Paddle's behaviour, and the vocab-parallel lowering (the class
axis sharded, reduced inside the op) against serial numpy, simulated and on MPI."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.program import LocalStep
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def test_the_class_dim_keeps_its_shard_and_the_rest_merge() -> None:
    # c_softmax_with_cross_entropy/forward/1 (mesh [2,4]): x [16,4,2] dm [1,-1,0]
    mesh = ProcessMesh.from_shape([2, 4])
    info = get_rule("c_softmax_with_cross_entropy").infer_forward(
        TensorSpec([16, 4, 2], DistAttr(mesh, [1, -1, 0])),
        TensorSpec([16, 4, 1], DistAttr(mesh, [-1, 0, 1])), -100, 0, 2)
    assert [list(a.dims_mapping) for a in info.inputs] == [[1, -1, 0], [1, -1, -1]]  # type: ignore[union-attr]
    assert [list(a.dims_mapping) for a in info.outputs] == [[1, -1, 0], [1, -1, -1]]  # type: ignore[union-attr]
    with pytest.raises(sr.ShardingConflictError):
        get_rule("c_softmax_with_cross_entropy").infer_forward(
            spec([8, 4], [0, -1]), spec([8, 1], [1, -1]), -100, 0, 1)
    with pytest.raises(sr.RuleArgumentError, match="hard labels"):
        get_rule("c_softmax_with_cross_entropy").infer_forward(
            spec([8, 4], [0, -1]), spec([8, 4], [1, -1]), -100, 0, 1)


def _model() -> Graph:
    with Graph("c-softmax-ce") as g:
        x = g.input("x", [4, 3, 10], "float64")
        shard(x, MESH, ("dp", None, "mp"))
        label = g.input("label", [4, 3, 1], "int64")
        _, loss = ops.c_softmax_with_cross_entropy(x, label, ignore_index=3)
        ops.multiply(loss, loss, name="out")
    return g


def _feeds() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    return {"x": rng.standard_normal((4, 3, 10)), "label": rng.integers(0, 10, (4, 3, 1))}


def test_vocab_parallel_equals_serial_forward_and_reverse() -> None:
    g = _model()
    prog = lower(complete(g))
    assert any(isinstance(i, LocalStep) for i in prog.instructions)  # the vocab-parallel lowering
    res = run_simulated(prog, _feeds())
    err, worst = max_error(res.fetch_all(), run_serial(g, _feeds()))
    assert err <= 1e-12, f"{worst} differs by {err}"
    gp = gradient_program(prog, ["out"])
    seed = {"out": np.random.default_rng(2).standard_normal(prog.buffers["out"].shape)}
    grads = run_simulated(gp, {**_feeds(), gp.seeds["out"]: seed["out"]})
    got = {t: grads.fetch(b) for t, b in gp.grads.items()}
    worst_check = max(check_gradients(g, _feeds(), seed, got, directions=1, entries=1),
                      key=lambda c: c.error)
    assert worst_check.error <= 1e-7, worst_check


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_vocab_parallel_on_mpi_equals_serial() -> None:
    g = _model()
    prog = lower(complete(g))
    run = run_mpi(prog, _feeds(), nprocs=4, timeout=120)
    err, worst = max_error(run.values, run_serial(g, _feeds()))
    assert err <= 1e-12, f"{worst} differs by {err}"
