"""transpose / transpose2: hand-written cases, typed errors, and the execution proof of the
`transpose-keeps-nondivisible-shard` deviation (docs/deviations/shape.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.conformance.calls import call_engine
from spmdrules.conformance.deviation import classify
from spmdrules.conformance.runner import default_case_paths, iter_cases
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.shards import ShardMismatch, gather, run_local

Array = np.ndarray[Any, Any]
MESH22 = ProcessMesh.from_shape([2, 2], list(range(4)))
MESH42 = ProcessMesh.from_shape([4, 2], list(range(8)))


def spec(mesh: ProcessMesh, shape: Sequence[int], dm: Sequence[int], partial: Any = None
         ) -> TensorSpec:
    return TensorSpec(list(shape), DistAttr(mesh, list(dm), partial))


def maps(info: SpmdInfo) -> tuple[list[str], list[str]]:
    return (
        [a.mapping_str() for a in info.inputs if isinstance(a, DistAttr)],
        [a.mapping_str() for a in info.outputs if isinstance(a, DistAttr)],
    )


@pytest.mark.parametrize("op", ["transpose", "transpose2"])
def test_forward_moves_shards_with_their_dims_and_keeps_partial(op: str) -> None:
    x = spec(MESH42, [8, 6, 4], [0, -1, 1], {})
    assert maps(get_rule(op).infer_forward(x, [2, 0, 1])) == (["[0,-1,1]"], ["[1,0,-1]"])
    xp = spec(MESH22, [4, 6], [0, -1], {1: "sum"})
    assert maps(get_rule(op).infer_forward(xp, [-1, 0])) == (
        ["[0,-1] P{1:sum}"], ["[-1,0] P{1:sum}"]
    )


def test_co_sharded_dim_moves_whole() -> None:
    x = TensorSpec([8, 3], DistAttr(MESH22, multi_dims_mapping=[[1, 0], []]))
    assert maps(get_rule("transpose").infer_forward(x, [1, 0])) == (
        ["[[1,0],-1]"], ["[-1,[1,0]]"]
    )


def test_reverse_reads_x_off_out_and_drops_partials() -> None:
    x = spec(MESH42, [8, 2], [-1, -1], {1: "sum"})
    out = spec(MESH42, [2, 8], [0, 1])
    # reverse/7: Paddle replicates x's 2-dim (2 % 4 != 0); we keep it, like out does
    assert maps(get_rule("transpose").infer_reverse(x, out, [1, 0])) == (["[1,0]"], ["[0,1]"])


def test_errors_name_the_perm_and_the_tensor() -> None:
    x = spec(MESH22, [4, 6], [0, -1])
    rule = get_rule("transpose")
    with pytest.raises(RuleArgumentError, match=r"^transpose: perm \[0, 0\] is not a permutation"):
        rule.infer_forward(x, [0, 0])
    with pytest.raises(RuleArgumentError, match="has 3 entries but 'x' has rank 2"):
        rule.infer_forward(x, [0, 1, 2])
    with pytest.raises(RuleArgumentError, match="not a permutation"):
        rule.infer_forward(x, [0, 2])
    with pytest.raises(RuleArgumentError, match=r"'out' has shape \[4, 6\]"):
        rule.infer_reverse(x, spec(MESH22, [4, 6], [-1, -1]), [1, 0])
    with pytest.raises(RuleArgumentError, match="perm"):
        rule.infer_forward(x)


# ---- execution proof ----------------------------------------------------------------------------
def execute(x: Array, perm: Sequence[int], x_attr: DistAttr, out_attr: DistAttr) -> Array:
    blocks = run_local(lambda b: np.transpose(b, perm), [(x, x_attr)])
    return gather(blocks, [x.shape[d] for d in perm], out_attr)


def test_proof_transpose_keeps_nondivisible_shard_forward() -> None:
    # quirk 9: x[7,5] dm[0,1] perm [1,0] -> Paddle: in [0,1], out [-1,-1]
    x = np.arange(35.0).reshape(7, 5)
    x_attr = DistAttr(MESH22, [0, 1])
    paddle_out = DistAttr(MESH22, [-1, -1])
    # each device only holds its block: the "replicated" output it claims is four different arrays
    with pytest.raises(ShardMismatch):
        execute(x, [1, 0], x_attr, paddle_out)
    info = get_rule("transpose").infer_forward(spec(MESH22, [7, 5], [0, 1]), [1, 0])
    xa, oa = info.inputs[0], info.outputs[0]
    assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
    assert (xa.mapping_str(), oa.mapping_str()) == ("[0,1]", "[1,0]")
    np.testing.assert_array_equal(execute(x, [1, 0], xa, oa), x.T)


def test_proof_transpose_keeps_nondivisible_shard_reverse() -> None:
    # transpose/reverse/7: out[2,8] dm[0,1] on mesh [4,2] -> Paddle: x [1,-1], out [0,1]
    x = np.arange(16.0).reshape(8, 2)
    with pytest.raises(ShardMismatch):
        execute(x, [1, 0], DistAttr(MESH42, [1, -1]), DistAttr(MESH42, [0, 1]))
    info = get_rule("transpose").infer_reverse(
        spec(MESH42, [8, 2], [-1, -1]), spec(MESH42, [2, 8], [0, 1]), [1, 0]
    )
    xa, oa = info.inputs[0], info.outputs[0]
    assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
    np.testing.assert_array_equal(execute(x, [1, 0], xa, oa), x.T)


def test_deviation_class_files_paddles_cases() -> None:
    for case_id in ("transpose/forward/14", "transpose/reverse/7"):
        op = case_id.split("/")[0]
        c = next(r for r in iter_cases(default_case_paths(), [op]) if r["case_id"] == case_id)
        got = call_engine(c)
        assert classify(c, got) == "transpose-keeps-nondivisible-shard"
        # a different (wrong) answer is not excused by the class
        mesh = got.inputs[0].mesh  # type: ignore[union-attr]
        n = len(c["inputs"][0]["shape"])
        bogus = SpmdInfo([DistAttr.replicated(mesh, n)], [DistAttr.replicated(mesh, n)])
        assert classify(c, bogus) is None


def _attr(mesh: ProcessMesh, e: dict[str, Any]) -> DistAttr:
    return DistAttr(mesh, list(e["dims_mapping"]), {int(k): v for k, v in e["partial"].items()})


@pytest.mark.parametrize("op", ["transpose", "transpose2"])
def test_every_filed_case_paddle_fails_and_ours_passes_by_execution(op: str) -> None:
    filed = 0
    for c in iter_cases(default_case_paths(), [op]):
        got = call_engine(c)
        if classify(c, got) != "transpose-keeps-nondivisible-shard":
            continue
        filed += 1
        mesh = ProcessMesh.from_shape(c["mesh"]["shape"], c["mesh"]["process_ids"])
        shape = c["inputs"][0]["shape"]
        perm = [p % len(shape) for p in c["attrs"]["perm"]]
        x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
        xa, oa = got.inputs[0], got.outputs[0]
        assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
        ex, eo = _attr(mesh, c["expected"]["inputs"][0]), _attr(mesh, c["expected"]["outputs"][0])
        np.testing.assert_allclose(execute(x, perm, xa, oa), np.transpose(x, perm))
        with pytest.raises(ShardMismatch):
            execute(x, perm, ex, eo)
    assert filed > 0
