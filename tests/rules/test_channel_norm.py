"""batch_norm, group_norm, instance_norm (+ instance_norm_grad): Paddle's behaviour, errors, the
deviation's proof, and a model of all three run sharded (simulated and MPI) against serial numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, RuleArgumentError, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.local import get_kernel
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph
from spmdrules.verify import run_case
from spmdrules.verify.cases import Case
from spmdrules.verify.simulation import HarnessError, answer

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def dms(slots: Any) -> list[Any]:
    return [None if a is None else list(a.dims_mapping) for a in slots]


# ---- Paddle's behaviour ----------------------------------------------------------------------------
def test_batch_norm_keeps_only_the_channel_shard() -> None:
    # batch_norm/forward/9 (mesh [2,2]): x [6,12,16,6] dm [-1,1,0,-1]
    c = spec([12], [-1])
    info = get_rule("batch_norm").infer_forward(spec([6, 12, 16, 6], [-1, 1, 0, -1]), c, c, c, c)
    assert dms(info.inputs) == [[-1, 1, -1, -1], [1], [1], [-1], [-1]]
    assert dms(info.outputs) == [[-1, 1, -1, -1], [1], [1], [1], [1], [-1]]
    # partials are resharded: a norm is not linear
    info = get_rule("batch_norm").infer_forward(spec([4, 3], [0, -1], {1: "sum"}), *[spec([3], [-1])] * 4)
    assert not any(a.partial_items for a in (*info.inputs, *info.outputs))


def test_batch_norm_channel_last_keeps_the_last_dim() -> None:
    c = spec([5], [-1])
    info = get_rule("batch_norm").infer_forward(spec([4, 6, 5], [0, -1, 1]), c, c, c, c,
                                                data_format="NHWC")
    assert dms(info.inputs)[0] == [-1, -1, 1] and dms(info.outputs)[1] == [1]


def test_group_norm_keeps_the_batch_and_instance_norm_batch_and_channel() -> None:
    p = spec([4], [0])
    info = get_rule("group_norm").infer_forward(spec([16, 4, 6, 8], [1, 0, -1, -1]), p, None)
    assert dms(info.inputs) == [[1, -1, -1, -1], [-1], None]
    assert dms(info.outputs) == [[1, -1, -1, -1], [1, -1], [1, -1]]
    info = get_rule("instance_norm").infer_forward(spec([16, 4, 6, 8], [1, 0, -1, -1]), p, p)
    assert dms(info.outputs) == [[1, 0, -1, -1], [1, 0], [1, 0]]


def test_instance_norm_grad_sums_scale_grad_over_n_and_c() -> None:
    x = spec([8, 4, 6, 2], [0, 1, -1, -1])
    stat = spec([8, 4], [-1, -1])
    info = get_rule("instance_norm_grad").infer_forward(
        x, spec([4], [-1]), spec([4], [-1]), stat, stat, spec([8, 4, 6, 2], [-1, -1, 0, -1]))
    assert dms(info.inputs) == [[0, 1, -1, -1], [-1], [-1], [0, 1], [0, 1], [0, 1, -1, -1]]
    assert info.outputs[1].partial_items == ((0, "sum"), (1, "sum"))  # type: ignore[union-attr]


def test_errors_are_typed_and_name_the_tensor() -> None:
    with pytest.raises(RuleArgumentError, match=r"'scale'.*should be 1"):
        get_rule("group_norm").infer_forward(spec([4, 4, 2], [-1, -1, -1]), spec([], []), None)
    with pytest.raises(RuleArgumentError, match=r"'x' has rank 6"):
        get_rule("batch_norm").infer_forward(spec([2] * 6, [-1] * 6), *[spec([2], [-1])] * 4)
    with pytest.raises(RuleArgumentError, match="'mean' has size 3 but must have 4"):
        get_rule("batch_norm").infer_forward(spec([2, 4], [-1, -1]), spec([3], [-1]),
                                             *[spec([4], [-1])] * 3)
    with pytest.raises(sr.SpmdError):
        ops.group_norm(Graph("g").input("x", [2, 6, 3]), None, None, groups=4)


# ---- the deviation, proven by execution ---------------------------------------------------------------
def test_instance_norm_grad_paddle_omits_bias_a_format_ours_executes() -> None:
    x = spec([4, 4, 3, 2], [0, 1, -1, -1])
    p, stat = spec([4], [-1]), spec([4, 4], [0, 1])
    args = (x, p, p, stat, stat, x)
    ours = get_rule("instance_norm_grad").infer_forward(*args, 1e-5)
    case = Case(rule="instance_norm_grad", direction="forward", op="instance_norm_grad",
                mesh=MESH, inputs=args, outputs=(x, p, p), attrs={"epsilon": 1e-5},
                domains=("real", "positive", "real", "real", "positive", "real"))
    status = run_case(case, ours, get_kernel("instance_norm_grad"), np.random.default_rng(0),
                      alternatives=False)
    assert status.status == "ok", status.detail
    # Paddle's answer: five input attributes for six tensors (none for bias): malformed as
    # written; with bias laid out as ours (the kernel does not read it) it is ours, which runs
    # (a format equivalence, formats.OMITTED, not a deviation)
    paddle = sr.SpmdInfo(ours.inputs[:2] + ours.inputs[3:], ours.outputs)
    with pytest.raises(HarnessError):
        answer(case, paddle)
    bias = ours.inputs[2]
    assert bias is not None and not any(bias.multi_dims_mapping)  # type: ignore[union-attr]


# ---- a model: the three norms sharded, simulated and MPI, against serial numpy --------------------
def _model(training: bool) -> Graph:
    with Graph(f"norms-{'train' if training else 'test'}") as g:
        x = g.input("x", [6, 4, 5, 3], "float64")
        shard(x, MESH, ("dp", "mp", None, None))
        c = [g.input(n, [4], "float64") for n in ("mean", "variance", "scale", "bias")]
        y, *_ = ops.batch_norm(x, *c, is_test=not training, momentum=0.8)
        z, _, _ = ops.instance_norm(x, c[2], c[3])
        w, _, _ = ops.group_norm(ops.add(y, z), c[2], None, groups=2)
        ops.multiply(w, y, name="loss")
    return g


def _feeds(g: Graph) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    return {t.name: rng.uniform(0.5, 1.5, t.shape) for t in g.tensors if t.producer is None}


@pytest.mark.parametrize("training", [True, False])
def test_the_norms_sharded_equal_serial_forward_and_reverse(training: bool) -> None:
    g = _model(training)
    prog = lower(complete(g))
    feeds = _feeds(g)
    assert_simulated_equals_serial(g, feeds, prog=prog)


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_the_norms_sharded_on_mpi_equal_serial() -> None:
    g = _model(True)
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=3)
    feeds = {k: np.abs(v) + 0.5 if k == "variance" else v for k, v in feeds.items()}
    assert_mpi_equals_serial(g, feeds, prog=prog)
    gp = gradient_program(prog, ["loss"])
    seed = np.random.default_rng(2).standard_normal(prog.buffers["loss"].shape)
    grads = run_mpi(gp, {**feeds, gp.seeds["loss"]: seed}, nprocs=4,
                    fetch=list(gp.grads.values()), timeout=120)
    sim = run_simulated(gp, {**feeds, gp.seeds["loss"]: seed})
    for b in gp.grads.values():
        np.testing.assert_allclose(grads.values[b], sim.fetch(b), rtol=1e-12, atol=1e-12)
