"""label_smooth and its gradient rule: Paddle's behaviour, the deviations' proofs, and a sharded
run (simulated and MPI) against serial numpy."""

from __future__ import annotations

from typing import Any

import pytest
from proofs import execute
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph
from spmdrules.verify.cases import Case
from spmdrules.verify.simulation import HarnessError, answer

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: list[int], dm: list[int], partial: Any = None, mesh: ProcessMesh = MESH
         ) -> TensorSpec:
    return TensorSpec(shape, DistAttr(mesh, dm, partial))


def dms(slots: Any) -> list[Any]:
    return [None if a is None else list(a.dims_mapping) for a in slots]


def test_label_and_prior_merge_elementwise_and_out_takes_label_s_layout() -> None:
    # label_smooth/forward/7: label [3,3,10] dm [1,0,-1], prior [1,10] dm [1,0]
    info = get_rule("label_smooth").infer_forward(spec([3, 3, 10], [1, 0, -1]),
                                                  spec([1, 10], [1, 0]), 0.1)
    assert dms(info.inputs) == [[1, 0, -1], [-1, -1]] and dms(info.outputs) == [[1, 0, -1]]
    # a 0-d prior reads as absent; partials are resharded
    info = get_rule("label_smooth").infer_forward(spec([12], [1], {0: "sum"}), spec([], []), 0.0)
    assert dms(info.outputs) == [[1]] and not info.outputs[0].partial_items  # type: ignore[union-attr]
    grad = get_rule("label_smooth_grad").infer_forward(spec([6, 8], [1, 0], None), 0.1)
    assert dms(grad.outputs) == [[1, 0]]


def test_keeps_uneven_shard_both_execute_ours_keeps_the_parallelism() -> None:
    # label_smooth/forward/4 (mesh [4]): label [9] dm [0], no prior; Paddle replicates
    mesh = ProcessMesh([0, 1, 2, 3])
    args = (spec([9], [0], mesh=mesh), None)
    ours = get_rule("label_smooth").infer_forward(*args, 0.0)
    assert dms(ours.outputs) == [[0]]
    assert execute("label_smooth", args, ours, {"epsilon": 0.0}, ("prob", None)) == "ok"


def test_out_rank_paddle_malformed_ours_executes() -> None:
    # label_smooth/forward/3 (mesh [4,2]): label [4], prior [1,4] dm [-1,0]
    mesh = ProcessMesh.from_shape([4, 2])
    args = (spec([4], [-1], mesh=mesh), spec([1, 4], [-1, 0], mesh=mesh))
    ours = get_rule("label_smooth").infer_forward(*args, 0.1)
    assert dms(ours.outputs) == [[0]]
    assert execute("label_smooth", args, ours, {"epsilon": 0.1}, ("prob", "prob")) == "ok"
    paddle = sr.SpmdInfo(ours.inputs, (DistAttr(mesh, [-1, 0]),))
    case = Case(rule="label_smooth", direction="forward", op="label_smooth", mesh=mesh,
                inputs=args, outputs=(spec([4], [-1], mesh=mesh),), attrs={"epsilon": 0.1},
                domains=("prob", "prob"))
    with pytest.raises(HarnessError):
        answer(case, paddle)


def _model() -> Graph:
    with Graph("label-smooth") as g:
        label = g.input("label", [6, 8], "float64")
        shard(label, MESH, ("dp", "mp"))
        prior = g.input("prior_dist", [1, 8], "float64")
        out = ops.label_smooth(label, prior, epsilon=0.1)
        ops.multiply(out, ops.label_smooth(label, None, epsilon=0.2), name="loss")
    return g


def test_label_smooth_sharded_equals_serial_forward_and_reverse() -> None:
    g = _model()
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=1)
    assert_simulated_equals_serial(g, feeds, prog=prog)


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_label_smooth_on_mpi_equals_serial() -> None:
    g = _model()
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=1)
    assert_mpi_equals_serial(g, feeds, prog=prog)
