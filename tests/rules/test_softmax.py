"""softmax / log_softmax rules: Paddle's behaviour, errors, and the uneven-sharding deviation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from spmdrules import DistAttr, ProcessMesh, RuleArgumentError, TensorSpec, get_rule
from spmdrules.core.shards import ShardMismatch, gather, run_local

MESH = ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def dm(a: Any) -> list[int]:
    return list(a.dims_mapping)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return np.asarray(e / e.sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_forward_replicates_the_normalised_axis(op: str) -> None:
    info = get_rule(op).infer_forward(spec([8, 16, 128, 128], [0, 1, -1, -1]), -1)
    assert dm(info.inputs[0]) == dm(info.outputs[0]) == [0, 1, -1, -1]
    info = get_rule(op).infer_forward(spec([8, 16, 4], [0, -1, 1]), 2)
    assert dm(info.inputs[0]) == dm(info.outputs[0]) == [0, -1, -1]


def test_forward_negative_axis_and_partial_dropped() -> None:
    info = get_rule("softmax").infer_forward(spec([8, 16], [-1, 1], {0: "sum"}), -2)
    assert dm(info.outputs[0]) == [-1, 1]
    assert not info.inputs[0].is_partial() and not info.outputs[0].is_partial()  # type: ignore[union-attr]


def test_quirk9_uneven_dim_kept_on_both_sides() -> None:
    # Paddle: in [-1,1], out [-1,-1]; we keep the 7 (on a mesh dim of size 2) sharded on both.
    info = get_rule("softmax").infer_forward(spec([8, 7], [-1, 1]), 0)
    assert dm(info.inputs[0]) == dm(info.outputs[0]) == [-1, 1]


def test_reverse_follows_out_and_replicates_axis() -> None:
    info = get_rule("softmax").infer_reverse(
        spec([4, 8, 6], [1, -1, -1]), spec([4, 8, 6], [-1, 0, 1]), -1
    )
    assert dm(info.inputs[0]) == dm(info.outputs[0]) == [-1, 0, -1]


def test_reverse_uneven_out_dim_kept_on_both_sides() -> None:
    # Paddle: out keeps [-1,1] (size 3 over 2 shards), x gets [-1,-1]; ours keeps it on both.
    info = get_rule("log_softmax").infer_reverse(
        spec([8, 3, 6], [-1, -1, -1]), spec([8, 3, 6], [-1, 1, -1]), 2
    )
    assert dm(info.inputs[0]) == dm(info.outputs[0]) == [-1, 1, -1]


def test_errors_are_typed_and_name_the_problem() -> None:
    with pytest.raises(RuleArgumentError, match=r"softmax: .*axis 3 .*'x' of rank 2"):
        get_rule("softmax").infer_forward(spec([8, 8], [0, -1]), 3)
    with pytest.raises(RuleArgumentError, match="'out' has"):
        get_rule("softmax").infer_reverse(spec([8, 8], [0, -1]), spec([8, 4], [0, -1]), -1)


def test_zero_d_tensor() -> None:
    info = get_rule("softmax").infer_forward(TensorSpec([], DistAttr(MESH, [])), -1)
    assert dm(info.outputs[0]) == []


# ---- deviation softmax-keeps-uneven-shard: Paddle's one-sided answers fail, ours execute -------
def _run(x: np.ndarray, x_attr: DistAttr, out_attr: DistAttr, axis: int) -> np.ndarray:
    blocks = run_local(lambda b: softmax(b, axis), [(x, x_attr)])
    return gather(blocks, x.shape, out_attr)


def test_deviation_forward_paddle_answer_is_wrong_ours_is_right() -> None:
    x = np.random.default_rng(0).standard_normal((8, 7))
    paddle_in, paddle_out = DistAttr(MESH, [-1, 1]), DistAttr(MESH, [-1, -1])
    with pytest.raises(ShardMismatch):  # blocks of x produce blocks, not the declared replica
        _run(x, paddle_in, paddle_out, 0)
    info = get_rule("softmax").infer_forward(TensorSpec([8, 7], paddle_in), 0)
    ours = _run(x, info.inputs[0], info.outputs[0], 0)  # type: ignore[arg-type]
    np.testing.assert_allclose(ours, softmax(x, 0))


def test_deviation_reverse_paddle_answer_is_wrong_ours_is_right() -> None:
    x = np.random.default_rng(1).standard_normal((8, 3, 6))
    paddle_in, paddle_out = DistAttr(MESH, [-1, -1, -1]), DistAttr(MESH, [-1, 1, -1])
    with pytest.raises(ShardMismatch):  # a full replica written where a block is declared
        _run(x, paddle_in, paddle_out, 2)
    info = get_rule("softmax").infer_reverse(
        TensorSpec([8, 3, 6], paddle_in), TensorSpec([8, 3, 6], paddle_out), 2
    )
    ours = _run(x, info.inputs[0], info.outputs[0], 2)  # type: ignore[arg-type]
    np.testing.assert_allclose(ours, softmax(x, 2))
