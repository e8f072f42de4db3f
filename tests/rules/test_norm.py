"""layer_norm / fused_rms_norm rules: Paddle's behaviour, errors, and the deviations' proofs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

from spmdrules import (
    DistAttr,
    ProcessMesh,
    RuleArgumentError,
    ShardingConflictError,
    SpmdInfo,
    TensorSpec,
    get_rule,
)
from spmdrules.core.shards import ShardMismatch, gather, run_local

MESH = ProcessMesh([[0, 1], [2, 3]])
EPS = 1e-5


def spec(shape: list[int], dm: list[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def dm(a: Any) -> list[int]:
    return list(a.dims_mapping)


def layer_norm(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, bna: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    axes = tuple(range(bna, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + EPS)
    if scale is not None:
        y = y * scale.reshape(x.shape[bna:])
    if bias is not None:
        y = y + bias.reshape(x.shape[bna:])
    return y, mean.reshape(x.shape[:bna]), var.reshape(x.shape[:bna])


# ---- layer_norm forward --------------------------------------------------------------------------
def test_layer_norm_forward_benchmark_case() -> None:
    mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    x = TensorSpec([8, 128, 1024], DistAttr(mesh, [0, 1, -1]))
    p = TensorSpec([1024], DistAttr(mesh, [-1]))
    info = get_rule("layer_norm").infer_forward(x, p, p, 1e-5, 2)
    assert [dm(a) for a in info.inputs] == [[0, 1, -1], [-1], [-1]]
    assert [dm(a) for a in info.outputs] == [[0, 1, -1], [0, 1], [0, 1]]


def test_layer_norm_forward_replicates_normalised_dims_params_and_partials() -> None:
    info = get_rule("layer_norm").infer_forward(
        spec([8, 16, 9, 12], [-1, 1, 0, -1]),
        spec([108], [0], {1: "sum"}),
        spec([108], [1]),
        1e-5,
        2,
    )
    assert [dm(a) for a in info.inputs] == [[-1, 1, -1, -1], [-1], [-1]]
    assert [dm(a) for a in info.outputs] == [[-1, 1, -1, -1], [-1, 1], [-1, 1]]
    assert not any(a.is_partial() for a in (*info.inputs, *info.outputs))  # type: ignore[union-attr]


def test_quirk20_mean_variance_have_rank_begin_norm_axis() -> None:
    info = get_rule("layer_norm").infer_forward(
        spec([7, 4, 10, 2], [0, -1, -1, -1]), None, None, 1e-5, 3
    )
    # no divisibility check (quirk 7): 7 rows over 2 shards stay sharded
    assert [dm(a) for a in info.outputs] == [[0, -1, -1, -1], [0, -1, -1], [0, -1, -1]]
    assert info.inputs[1] is None and info.inputs[2] is None
    info = get_rule("layer_norm").infer_forward(spec([4, 8], [0, 1]), None, None, 1e-5, 0)
    assert [dm(a) for a in info.outputs] == [[-1, -1], [], []]


def test_layer_norm_errors() -> None:
    rule = get_rule("layer_norm")
    with pytest.raises(RuleArgumentError, match=r"layer_norm: 'scale' has shape \[\] .*1-D of size 4"):
        rule.infer_forward(spec([8, 4], [-1, 0]), TensorSpec([], DistAttr(MESH, [])), None, 1e-5, 1)
    with pytest.raises(RuleArgumentError, match=r"'bias' has shape \[5\]"):
        rule.infer_forward(spec([8, 4], [-1, 0]), None, spec([5], [-1]), 1e-5, 1)
    with pytest.raises(RuleArgumentError, match="begin_norm_axis 2 is out of range"):
        rule.infer_forward(spec([8, 4], [-1, 0]), None, None, 1e-5, 2)
    with pytest.raises(RuleArgumentError, match="begin_norm_axis -1"):
        rule.infer_forward(spec([8, 4], [-1, 0]), None, None, 1e-5, -1)


# ---- layer_norm reverse --------------------------------------------------------------------------
def test_layer_norm_reverse_merges_out_and_statistics() -> None:
    info = get_rule("layer_norm").infer_reverse(
        spec([32, 8], [-1, -1]), spec([8], [-1]), spec([8], [-1]),
        spec([32, 8], [0, -1]), spec([32], [0]), spec([32], [-1]), 1e-5, 1,
    )
    assert [dm(a) for a in info.inputs] == [[0, -1], [-1], [-1]]
    assert [dm(a) for a in info.outputs] == [[0, -1], [0], [0]]


def test_layer_norm_reverse_normalised_dim_keeps_its_mesh_dim_first() -> None:
    # out's normalised dim claims mesh dim 0 before mean's row dim does: rows stay replicated.
    info = get_rule("layer_norm").infer_reverse(
        spec([16, 32], [-1, 0]), None, None,
        spec([16, 32], [-1, 0]), spec([16], [0]), spec([16], [0]), 1e-5, 1,
    )
    assert [dm(a) for a in info.outputs] == [[-1, -1], [-1], [-1]]


def test_quirk_a1_layer_norm_reverse_conflict_is_an_error() -> None:
    with pytest.raises(ShardingConflictError, match="layer_norm: tensor axis 'a'"):
        get_rule("layer_norm").infer_reverse(
            spec([2, 8, 8, 16], [-1, 0, 1, -1]), None, None,
            spec([2, 8, 8, 16], [1, -1, 0, -1]), spec([2], [0]), spec([2], [1]), 1e-6, 1,
        )


def test_layer_norm_reverse_shape_errors() -> None:
    with pytest.raises(RuleArgumentError, match=r"'mean' has shape \[4\]"):
        get_rule("layer_norm").infer_reverse(
            spec([8, 4], [-1, -1]), None, None,
            spec([8, 4], [-1, -1]), spec([4], [-1]), spec([8], [-1]), 1e-5, 1,
        )


# ---- fused_rms_norm --------------------------------------------------------------------------------
def test_rms_norm_forward_and_reverse() -> None:
    rule = get_rule("fused_rms_norm")
    info = rule.infer_forward(spec([4, 16, 8], [1, -1, 0]), spec([8], [0]), 1e-6)
    assert [dm(a) for a in info.inputs] == [[1, -1, -1], [-1]]
    assert [dm(a) for a in info.outputs] == [[1, -1, -1], [1, -1]]
    info = rule.infer_reverse(
        spec([8, 7, 8, 64], [-1, -1, -1, 0]), spec([64], [0]),
        spec([8, 7, 8, 64], [0, -1, -1, -1]), spec([8, 7, 8], [-1, 1, -1], {0: "sum"}), 1e-6,
    )
    assert [dm(a) for a in info.inputs] == [[0, 1, -1, -1], [-1]]
    assert [dm(a) for a in info.outputs] == [[0, 1, -1, -1], [0, 1, -1]]
    assert not info.outputs[1].is_partial()  # type: ignore[union-attr]


def test_rms_norm_errors() -> None:
    with pytest.raises(RuleArgumentError, match=r"fused_rms_norm: 'scale' has shape \[4\]"):
        get_rule("fused_rms_norm").infer_forward(spec([8, 8], [0, -1]), spec([4], [-1]), 1e-6)
    with pytest.raises(RuleArgumentError, match="fused_rms_norm: the last dim -1"):
        get_rule("fused_rms_norm").infer_forward(
            TensorSpec([], DistAttr(MESH, [])), spec([1], [-1]), 1e-6
        )


# ---- deviations, proven by execution -----------------------------------------------------------------
def test_deviation_reverse_keeps_partial_paddle_wrong_ours_right() -> None:
    rng = np.random.default_rng(0)
    x, scale, bias = rng.standard_normal((4, 6)), rng.standard_normal(6), rng.standard_normal(6)
    want = layer_norm(x, scale, bias, 1)[0]
    rep2, rep1 = DistAttr(MESH, [-1, -1]), DistAttr(MESH, [-1])

    def kernel(xb: np.ndarray, sb: np.ndarray, bb: np.ndarray) -> np.ndarray:
        return layer_norm(xb, sb, bb, 1)[0]

    # Paddle keeps a partial scale while out is declared complete: replicas disagree.
    paddle_scale = DistAttr(MESH, [-1], {0: "sum"})
    blocks = run_local(kernel, [(x, rep2), (scale, paddle_scale), (bias, rep1)])
    with pytest.raises(ShardMismatch):
        gather(blocks, x.shape, rep2)
    # Paddle keeps out's P{0} while its inputs are complete: the sum doubles the result.
    blocks = run_local(kernel, [(x, rep2), (scale, rep1), (bias, rep1)])
    assert not np.allclose(gather(blocks, x.shape, DistAttr(MESH, [-1, -1], {0: "sum"})), want)

    info = get_rule("layer_norm").infer_reverse(
        TensorSpec([4, 6], rep2), TensorSpec([6], paddle_scale), TensorSpec([6], rep1),
        TensorSpec([4, 6], DistAttr(MESH, [-1, -1], {0: "sum"})),
        spec([4], [-1]), spec([4], [-1]), 1e-5, 1,
    )
    ins: Any = info.inputs
    blocks = run_local(kernel, [(x, ins[0]), (scale, ins[1]), (bias, ins[2])])
    np.testing.assert_allclose(gather(blocks, x.shape, info.outputs[0]), want)  # type: ignore[arg-type]


def test_absent_params_are_none_and_execute_right() -> None:
    x = np.random.default_rng(1).standard_normal((8, 3, 5))
    info = get_rule("layer_norm").infer_forward(spec([8, 3, 5], [0, 1, -1]), None, None, 1e-5, 2)
    assert info.inputs[1] is None and info.inputs[2] is None  # Paddle: mesh-less [-1]
    blocks = run_local(lambda b: layer_norm(b, None, None, 2), [(x, info.inputs[0])])  # type: ignore[list-item]
    for k, want in enumerate(layer_norm(x, None, None, 2)):
        got = gather({c: v[k] for c, v in blocks.items()}, want.shape, info.outputs[k])  # type: ignore[arg-type]
        np.testing.assert_allclose(got, want)


def test_rank0_param_reverse_reads_as_absent() -> None:
    """issue 14, defect 1: a 0-d scale/bias (the ``rank0`` absent convention) in reverse reads as
    absent, as Paddle's reverse does; the answer executes with no scale and no bias."""
    x, out = spec([16, 1], [0, -1]), spec([16, 1], [0, -1])
    stat = spec([16], [0])
    zero = TensorSpec([], DistAttr(MESH, []))
    info = get_rule("layer_norm").infer_reverse(x, zero, zero, out, stat, stat, 1e-5, 1)
    assert [dm(a) for a in info.inputs] == [[0, -1], [], []]
    assert [dm(a) for a in info.outputs] == [[0, -1], [0], [0]]
    run = SpmdInfo([info.inputs[0], None, None], list(info.outputs))
    assert execute("layer_norm", [x, None, None], run, {"epsilon": 1e-5, "begin_norm_axis": 1},
                   ("real", None, None)) == "ok"
    with pytest.raises(RuleArgumentError, match=r"'scale' has shape \[\]"):  # forward: as Paddle
        get_rule("layer_norm").infer_forward(x, zero, None, 1e-5, 1)
