"""cross_entropy_with_softmax / softmax_with_cross_entropy: Paddle's behaviour, errors, deviations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from spmdrules import (
    DistAttr,
    InvalidDistAttrError,
    ProcessMesh,
    RuleArgumentError,
    ShardingConflictError,
    SpmdError,
    TensorSpec,
    UnsupportedError,
    get_rule,
)
from spmdrules.core.shards import ShardMismatch, gather, run_local

MESH = ProcessMesh([[0, 1], [2, 3]])
CE = "cross_entropy_with_softmax"


def spec(shape: list[int], dm: list[int], partial: Any = None) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def dm(a: Any) -> list[int]:
    return list(a.dims_mapping)


def attrs(soft: bool = False, use_softmax: bool = True, axis: int = -1) -> tuple[Any, ...]:
    return (soft, use_softmax, True, -100, axis)


def softmax_ce(x: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hard labels on the last axis: (softmax, loss with size 1 on the class axis)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    sm = e / e.sum(axis=-1, keepdims=True)
    return sm, -np.log(np.take_along_axis(sm, label, axis=-1))


@pytest.mark.parametrize("op", [CE, "softmax_with_cross_entropy"])
def test_forward_batch_dims_follow_x_and_label(op: str) -> None:
    info = get_rule(op).infer_forward(spec([2, 6, 5], [0, 1, -1]), spec([2, 6, 1], [0, 1, -1]), *attrs())
    assert [dm(a) for a in info.inputs] == [[0, 1, -1], [0, 1, -1]]
    assert [dm(a) for a in info.outputs] == [[0, 1, -1], [0, 1, -1]]


def test_forward_vocab_parallel_class_axis() -> None:
    info = get_rule(CE).infer_forward(spec([16, 32], [0, 1]), spec([16, 1], [0, -1]), *attrs())
    assert [dm(a) for a in info.inputs] == [[0, 1], [0, -1]]
    assert [dm(a) for a in info.outputs] == [[0, 1], [0, -1]]
    assert not info.outputs[1].is_partial()  # type: ignore[union-attr]  # the kernel reduces the loss


@pytest.mark.parametrize(
    ("soft", "use_softmax", "axis", "why"),
    [(True, True, -1, "soft_label=True"), (False, False, -1, "use_softmax=False"),
     (False, True, 0, "class axis 0 is not the last")],
)
def test_quirk23_class_axis_refused(soft: bool, use_softmax: bool, axis: int, why: str) -> None:
    label = [4, 6] if soft else ([4, 1] if axis == -1 else [1, 6])
    dims = [-1, 1] if axis == -1 else [1, -1]
    with pytest.raises(UnsupportedError, match=f"{CE}: 'x' dim .*{why}"):
        get_rule(CE).infer_forward(spec([4, 6], dims), spec(label, [-1, -1]), *attrs(soft, use_softmax, axis))


def test_forward_conflict_and_shape_errors() -> None:
    with pytest.raises(ShardingConflictError, match="tensor axis 'a'"):
        get_rule(CE).infer_forward(spec([8, 6], [1, -1]), spec([8, 1], [0, -1]), *attrs())
    with pytest.raises(RuleArgumentError, match=r"'label' has shape \[8, 6\] but must be \[8, 1\]"):
        get_rule(CE).infer_forward(spec([8, 6], [1, -1]), spec([8, 6], [1, -1]), *attrs())
    with pytest.raises(RuleArgumentError, match="axis 2 is out of range"):
        get_rule(CE).infer_forward(spec([8, 6], [1, -1]), spec([8, 1], [1, -1]), *attrs(axis=2))


def test_reverse_merges_loss_and_softmax() -> None:
    info = get_rule(CE).infer_reverse(
        spec([12, 4, 2], [-1, -1, -1]), spec([12, 4, 1], [-1, -1, -1]),
        spec([12, 4, 2], [0, -1, 1]), spec([12, 4, 1], [-1, -1, -1]), *attrs(),
    )
    assert [dm(a) for a in info.inputs] == [[0, -1, 1], [0, -1, -1]]
    assert [dm(a) for a in info.outputs] == [[0, -1, 1], [0, -1, -1]]


def test_reverse_soft_label_replicates_class_axis() -> None:
    info = get_rule(CE).infer_reverse(
        spec([6, 10, 2], [-1, -1, -1]), spec([6, 10, 2], [-1, -1, -1]),
        spec([6, 10, 2], [1, -1, 0]), spec([6, 10, 1], [1, -1, -1]), *attrs(soft=True),
    )
    assert [dm(a) for a in info.inputs] == [[1, -1, -1], [1, -1, -1]]
    assert [dm(a) for a in info.outputs] == [[1, -1, -1], [1, -1, -1]]


def test_quirk23_reverse_without_softmax_is_a_typed_error() -> None:
    with pytest.raises(UnsupportedError, match="use_softmax=False"):
        get_rule(CE).infer_reverse(
            spec([8, 6], [0, -1]), spec([8, 1], [0, -1]), spec([8, 6], [0, -1]),
            spec([8, 1], [0, -1]), *attrs(use_softmax=False),
        )


def test_quirk_e_rank1_reverse_does_not_crash() -> None:
    info = get_rule(CE).infer_reverse(
        spec([8], [-1]), spec([1], [-1]), spec([8], [0]), spec([1], [-1]), *attrs()
    )
    assert [dm(a) for a in info.inputs] == [[0], [-1]]
    with pytest.raises(SpmdError):
        get_rule(CE).infer_forward(TensorSpec([], DistAttr(MESH, [])), spec([1], [-1]), *attrs())


# ---- deviations, proven by execution -----------------------------------------------------------------
def test_deviation_reverse_keeps_partial_paddle_wrong_ours_right() -> None:
    rng = np.random.default_rng(0)
    x, label = rng.standard_normal((4, 6)), rng.integers(0, 6, size=(4, 1))
    want = softmax_ce(x, label)[0]
    rep = DistAttr(MESH, [-1, -1])
    # Paddle keeps x's P{0}; softmax of the pieces is not the softmax of their sum.
    paddle_x = DistAttr(MESH, [-1, -1], {0: "sum"})
    blocks = run_local(lambda a, b: softmax_ce(a, b)[0], [(x, paddle_x), (label, rep)])
    with pytest.raises(ShardMismatch):
        gather(blocks, x.shape, rep)
    info = get_rule(CE).infer_reverse(
        spec([4, 6], [-1, -1], {0: "sum"}), spec([4, 1], [-1, -1]),
        spec([4, 6], [-1, -1]), spec([4, 1], [-1, -1]), *attrs(),
    )
    blocks = run_local(lambda a, b: softmax_ce(a, b)[0], [(x, info.inputs[0]), (label, info.inputs[1])])  # type: ignore[list-item]
    np.testing.assert_allclose(gather(blocks, x.shape, info.outputs[0]), want)  # type: ignore[arg-type]


def test_deviation_rank0_softmax_out_without_softmax() -> None:
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(5), size=8)
    label = rng.integers(0, 5, size=(8, 1))
    # Paddle's softmax_out mapping [] is no attribute of the [8, 5] softmax output.
    with pytest.raises(InvalidDistAttrError):
        TensorSpec([8, 5], DistAttr(MESH, []))
    info = get_rule(CE).infer_forward(spec([8, 5], [0, -1]), spec([8, 1], [0, -1]), *attrs(use_softmax=False))
    assert dm(info.outputs[0]) == dm(info.inputs[0]) == [0, -1]

    def kernel(p: np.ndarray, lab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return p, -np.log(np.take_along_axis(p, lab, axis=-1))  # x passes through as softmax

    blocks = run_local(kernel, [(probs, info.inputs[0]), (label, info.inputs[1])])  # type: ignore[list-item]
    sm = gather({c: v[0] for c, v in blocks.items()}, (8, 5), info.outputs[0])  # type: ignore[arg-type]
    loss = gather({c: v[1] for c, v in blocks.items()}, (8, 1), info.outputs[1])  # type: ignore[arg-type]
    np.testing.assert_allclose(sm, probs)
    np.testing.assert_allclose(loss, -np.log(np.take_along_axis(probs, label, axis=-1)))


def test_deviation_soft_label_class_gathered_paddle_wrong_ours_right() -> None:
    # cross_entropy_with_softmax/forward/42 on mesh [2,4]: x[6] [-1], soft label[6] [0].
    # Paddle: x, label, softmax [0] and a whole loss [-1]; ours gathers the label's classes.
    mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    rng = np.random.default_rng(7)
    x = rng.standard_normal(6)
    label = rng.random(6)
    label /= label.sum()

    def kernel(xb: np.ndarray, lb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = np.exp(xb - xb.max())
        sm = e / e.sum()
        return sm, np.asarray([-(lb * np.log(sm)).sum()])

    serial_sm, serial_loss = kernel(x, label)
    got = get_rule(CE).infer_forward(
        TensorSpec([6], DistAttr(mesh, [-1])), TensorSpec([6], DistAttr(mesh, [0])), True
    )
    x_attr, l_attr = got.inputs
    sm_attr, loss_attr = got.outputs
    assert [dm(a) for a in (x_attr, l_attr, sm_attr, loss_attr)] == [[-1], [-1], [-1], [-1]]
    ours = run_local(kernel, [(x, x_attr), (label, l_attr)])
    np.testing.assert_allclose(gather({c: v[0] for c, v in ours.items()}, (6,), sm_attr), serial_sm)
    np.testing.assert_allclose(
        gather({c: v[1] for c, v in ours.items()}, (1,), loss_attr), serial_loss
    )
    # Paddle's attributes: each shard normalises its own classes and sums its own loss terms.
    p_in = DistAttr(mesh, [0])
    theirs = run_local(kernel, [(x, p_in), (label, p_in)])
    paddle_sm = gather({c: v[0] for c, v in theirs.items()}, (6,), DistAttr(mesh, [0]))
    assert not np.allclose(paddle_sm, serial_sm)
    with pytest.raises(ShardMismatch):  # the "whole" loss differs from shard to shard
        gather({c: v[1] for c, v in theirs.items()}, (1,), DistAttr(mesh, [-1]))
