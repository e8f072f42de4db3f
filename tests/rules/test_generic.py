"""default_data_parallel / default_ / replicated: quirk D.24, flat layout, typed errors, execution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import gather, scatter
from spmdrules.core.spec import SpmdInfo, TensorSpec

MESH = sr.ProcessMesh([[0, 1], [2, 3]])


def spec(shape: Sequence[int], dm: Sequence[int], partial: dict[int, str] | None = None
         ) -> TensorSpec:
    return TensorSpec(shape, DistAttr(MESH, dm, partial))


def dms(info: SpmdInfo) -> tuple[list[Any], list[Any]]:
    def one(a: Any) -> Any:
        assert isinstance(a, DistAttr)
        return (list(a.dims_mapping), a.partial) if a.partial else list(a.dims_mapping)

    return [one(a) for a in info.inputs], [one(a) for a in info.outputs]


@pytest.mark.parametrize("op", ["default_data_parallel", "default_"])
def test_forward_merges_the_inputs_batch_axis_quirk_d24(op: str) -> None:
    # default_data_parallel/forward/1: the outputs' own shardings (dim 0 on mesh 0) are ignored.
    ins = [spec([3, 64, 16, 7], [-1, 1, -1, -1]), spec([3, 4, 16], [1, -1, -1])]
    outs = [spec([3, 10, 6, 2], [0, -1, -1, 1]), spec([3], [-1])]
    info = sr.get_rule(op).infer_forward(ins, outs)
    assert dms(info) == ([[1, -1, -1, -1], [1, -1, -1]], [[1, -1, -1, -1], [1]])


@pytest.mark.parametrize("op", ["default_data_parallel", "default_"])
def test_reverse_merges_the_outputs_batch_axis(op: str) -> None:
    # default_data_parallel/reverse/0: the inputs' own shardings are ignored, partials dropped.
    ins = [spec([6, 4, 32], [-1, 1, 0]), spec([6], [1]), spec([6, 2, 4, 12], [1, 0, -1, -1])]
    outs = [spec([6, 4], [1, 0]), spec([6, 16], [1, 0]), spec([6], [1], {0: "sum"})]
    info = sr.get_rule(op).infer_reverse(ins, outs)
    assert dms(info) == ([[1, -1, -1], [1], [1, -1, -1, -1]], [[1, -1], [1, -1], [1]])


def test_batch_conflict_raises_naming_the_tensor() -> None:
    ins = [spec([4, 2], [0, -1]), spec([4], [1])]
    with pytest.raises(sr.ShardingConflictError, match=r"default_data_parallel: .*'ins\[1\]'"):
        sr.get_rule("default_data_parallel").infer_forward(ins, [spec([4], [-1])])
    outs = [spec([4, 2], [1, -1]), spec([4], [0])]
    with pytest.raises(sr.ShardingConflictError, match=r"default_: .*'outs\[1\]'"):
        sr.get_rule("default_").infer_reverse([spec([4], [-1])], outs)


def test_zero_d_tensors_have_no_batch_axis() -> None:
    ins = [spec([], []), spec([8, 2], [0, 1])]
    info = sr.get_rule("default_data_parallel").infer_forward(ins, [spec([], []), spec([8], [-1])])
    assert dms(info) == ([[], [0, -1]], [[], [0]])
    info = sr.get_rule("default_data_parallel").infer_forward([spec([], [], {0: "sum"})],
                                                               [spec([8], [1])])
    assert dms(info) == ([[]], [[-1]])


def test_empty_sides_raise() -> None:
    with pytest.raises(sr.RuleArgumentError, match="'ins' is an empty list"):
        sr.get_rule("default_data_parallel").infer_forward([], [spec([4], [0])])
    with pytest.raises(sr.RuleArgumentError, match="'outs' is an empty list"):
        sr.get_rule("default_").infer_reverse([spec([4], [0])], [])
    with pytest.raises(sr.RuleArgumentError, match="both empty"):
        sr.get_rule("replicated").infer_forward([], [])


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_replicated_replicates_everything(direction: str) -> None:
    rule = sr.get_rule("replicated")
    call = rule.infer_forward if direction == "forward" else rule.infer_reverse
    ins = [spec([32, 2, 32, 6], [0, 1, -1, -1]), spec([8], [-1], {0: "sum"})]
    outs = [spec([32, 8], [1, 0]), spec([], [], {1: "sum"})]
    assert dms(call(ins, outs)) == ([[-1, -1, -1, -1], [-1]], [[-1, -1], []])
    # only outputs (an op without tensor inputs)
    assert dms(call([], outs)) == ([], [[-1, -1], []])


def test_data_parallel_answer_computes_a_batchwise_op() -> None:
    # Rows are independent in a data-parallel op: run a row-wise kernel on the blocks.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3))
    info = sr.get_rule("default_data_parallel").infer_forward(
        [spec([8, 3], [1, 0], {})], [spec([8], [-1])]
    )
    assert dms(info) == ([[1, -1]], [[1]])
    in_attr, out_attr = info.inputs[0], info.outputs[0]
    assert isinstance(in_attr, DistAttr) and isinstance(out_attr, DistAttr)
    blocks = {c: b.sum(axis=1) for c, b in scatter(x, in_attr, rng).items()}
    np.testing.assert_allclose(gather(blocks, (8,), out_attr), x.sum(axis=1))
