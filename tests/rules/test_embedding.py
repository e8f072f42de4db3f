"""embedding / lookup_table_v2 rules: Paddle's behaviour, errors, and the deviation's proof."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from spmdrules import (
    DistAttr,
    ProcessMesh,
    RuleArgumentError,
    ShardingConflictError,
    TensorSpec,
    UnsupportedError,
    get_rule,
)
from spmdrules.core.shards import coords, gather, run_local, scatter, shard_slices

MESH = ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def dm(a: Any) -> list[int]:
    return list(a.dims_mapping)


@pytest.mark.parametrize("op", ["embedding", "lookup_table_v2"])
def test_forward_benchmark_case(op: str) -> None:
    mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    info = get_rule(op).infer_forward(
        TensorSpec([8, 512], DistAttr(mesh, [0, -1])),
        TensorSpec([32000, 1024], DistAttr(mesh, [-1, 1])), -1, False,
    )
    assert [dm(a) for a in info.inputs] == [[0, -1], [-1, 1]]
    assert dm(info.outputs[0]) == [0, -1, 1] and not info.outputs[0].is_partial()  # type: ignore[union-attr]


def test_quirk18_vocab_parallel_output_is_partial_sum() -> None:
    info = get_rule("embedding").infer_forward(spec([8], [0]), spec([5, 8], [1, -1]), -1, False)
    assert dm(info.outputs[0]) == [0, -1]
    assert info.outputs[0].partial == {1: "sum"}  # type: ignore[union-attr]


@pytest.mark.parametrize(("padding_idx", "sparse"), [(7, False), (-1, True)])
def test_quirk18_vocab_parallel_refuses_padding_and_sparse(padding_idx: int, sparse: bool) -> None:
    with pytest.raises(UnsupportedError, match=r"embedding: 'weight' dim 0 .*replicate weight dim 0"):
        get_rule("embedding").infer_forward(spec([12], [-1]), spec([9, 9], [0, -1]), padding_idx, sparse)


def test_quirk_a4_one_mesh_dim_on_two_axes_is_an_error() -> None:
    with pytest.raises(ShardingConflictError, match="mesh dim 0 shards both 'x' dim 0 and 'weight' dim 0"):
        get_rule("embedding").infer_forward(spec([12], [0]), spec([32, 2], [0, -1]), -1, False)
    with pytest.raises(ShardingConflictError, match="'x' dim 1 and 'weight' dim 1"):
        get_rule("embedding").infer_forward(spec([16, 9], [-1, 0]), spec([8, 16], [-1, 0]), -1, False)


def test_partial_ids_are_dropped() -> None:
    info = get_rule("embedding").infer_forward(
        spec([4, 9], [-1, -1], {0: "sum"}), spec([64, 7], [-1, -1]), -1, True
    )
    assert not info.inputs[0].is_partial() and not info.outputs[0].is_partial()  # type: ignore[union-attr]


def test_reverse_reads_x_and_hidden_off_out() -> None:
    info = get_rule("embedding").infer_reverse(
        spec([4, 10, 10], [1, 0, -1]), spec([6, 12], [1, 0]), spec([4, 10, 10, 12], [1, -1, -1, 0]), -1, False
    )
    assert [dm(a) for a in info.inputs] == [[1, -1, -1], [-1, 0]]
    assert dm(info.outputs[0]) == [1, -1, -1, 0]


def test_errors() -> None:
    rule = get_rule("embedding")
    with pytest.raises(RuleArgumentError, match="'weight' has rank 3"):
        rule.infer_forward(spec([4], [-1]), spec([4, 4, 4], [-1, -1, -1]), -1, False)
    with pytest.raises(RuleArgumentError, match="padding_idx 9 is not a row"):
        rule.infer_forward(spec([4], [-1]), spec([4, 4], [-1, -1]), 9, False)
    with pytest.raises(RuleArgumentError, match=r"'out' has shape \[4, 3\]"):
        rule.infer_reverse(spec([4], [-1]), spec([8, 4], [-1, -1]), spec([4, 3], [-1, -1]), -1, False)


# ---- execution -------------------------------------------------------------------------------------
def test_vocab_parallel_partial_output_executes_right() -> None:
    rng = np.random.default_rng(0)
    ids, table = rng.integers(0, 10, size=(6,)), rng.standard_normal((10, 4))
    info = get_rule("embedding").infer_forward(spec([6], [0]), spec([10, 4], [1, -1]), -1, False)
    x_attr, w_attr = info.inputs
    xs, ws = scatter(ids, x_attr), scatter(table, w_attr)  # type: ignore[arg-type]
    blocks = {}
    for c in coords(w_attr):  # type: ignore[arg-type]
        lo = shard_slices(table.shape, w_attr, c)[0].start  # type: ignore[arg-type]
        local = xs[c] - lo
        hit = (local >= 0) & (local < ws[c].shape[0])
        blocks[c] = np.where(hit[:, None], ws[c][np.clip(local, 0, ws[c].shape[0] - 1)], 0.0)
    np.testing.assert_allclose(gather(blocks, (6, 4), info.outputs[0]), table[ids])  # type: ignore[arg-type]


def test_deviation_reverse_out_partial_paddle_wrong_ours_right() -> None:
    rng = np.random.default_rng(1)
    ids, table = rng.integers(0, 8, size=(5, 4)), rng.standard_normal((8, 3))
    out_spec = spec([5, 4, 3], [-1, -1, -1], {1: "sum"})
    info = get_rule("embedding").infer_reverse(
        spec([5, 4], [-1, -1]), spec([8, 3], [-1, -1]), out_spec, -1, False
    )
    blocks = run_local(lambda x, w: w[x], [(ids, info.inputs[0]), (table, info.inputs[1])])  # type: ignore[list-item]
    # Paddle: inputs as ours, out still P{1}: the complete lookups get summed twice.
    assert not np.allclose(gather(blocks, (5, 4, 3), out_spec.attr), table[ids])
    np.testing.assert_allclose(gather(blocks, (5, 4, 3), info.outputs[0]), table[ids])  # type: ignore[arg-type]
