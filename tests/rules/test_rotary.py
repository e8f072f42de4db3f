"""fused_rotary_position_embedding: Paddle's behaviour, the sequence split only with sin and cos
and no position ids, typed errors, the kernel against a direct formula, and the deviation proven
by execution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
ROPE = sr.get_rule("fused_rotary_position_embedding")
ATTRS = {"use_neox_rotary_style": True, "time_major": False, "rotary_emb_base": 10000.0}


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[Any]:
    return [None if a is None else list(a.dims_mapping)  # type: ignore[union-attr]
            for a in (*info.inputs, *info.outputs)]


def test_sequence_stays_split_with_sin_and_cos() -> None:
    q = spec([4, 8, 6, 16], [-1, 0, 1, -1])
    t = spec([1, 8, 1, 16], [-1, -1, -1, -1])
    info = ROPE.infer_forward(q, q, None, t, t, None, **ATTRS)
    assert dms(info) == [[-1, 0, 1, -1], [-1, 0, 1, -1], None, [-1, 0, -1, -1],
                         [-1, 0, -1, -1], None, [-1, 0, 1, -1], [-1, 0, 1, -1], []]


def test_sequence_whole_with_position_ids_or_without_tables() -> None:
    q = spec([4, 8, 6, 16], [1, 0, -1, -1])
    t = spec([10, 16], [-1, -1])
    info = ROPE.infer_forward(q, None, None, t, t, spec([4, 8], [-1, -1]), **ATTRS)
    assert dms(info)[0] == [1, -1, -1, -1] and dms(info)[5] == [1, -1]
    info = ROPE.infer_forward(q, None, None, None, None, None, **ATTRS)
    assert dms(info)[0] == [1, -1, -1, -1]


def test_the_head_dim_claims_its_mesh_dim_before_it_is_dropped() -> None:
    # Paddle merges the head dim too: q's head-dim shard on mesh 0 keeps k's heads off mesh 0
    q, k = spec([4, 8, 6, 16], [-1, -1, -1, 0]), spec([4, 8, 6, 16], [-1, -1, 0, -1])
    assert dms(ROPE.infer_forward(q, k, None, None, None, None, **ATTRS))[0] == [-1] * 4
    with pytest.raises(ShardingConflictError, match="'d'"):
        ROPE.infer_forward(q, spec([4, 8, 6, 16], [-1, -1, -1, 1]), None, None, None, None,
                           **ATTRS)


@pytest.mark.parametrize("args,why", [
    (([4, 8, 6], None, None, None), "4-D"),
    (([4, 8, 6, 16], [4, 8, 6, 8], None, None), "one shape"),
    (([4, 8, 6, 16], None, [1, 7, 1, 16], None), "seq_len"),
    (([4, 8, 6, 15], None, None, None), "even"),
    (([4, 8, 6, 16], None, [9, 16], [4, 9]), "position_ids"),
])
def test_bad_shapes_are_typed_errors(args: tuple[Any, ...], why: str) -> None:
    q, k, t, ids = args
    with pytest.raises(RuleArgumentError, match=why):
        ROPE.infer_forward(spec(q, [-1] * len(q)), None if k is None else spec(k, [-1] * 4), None,
                           None if t is None else spec(t, [-1] * len(t)),
                           None if t is None else spec(t, [-1] * len(t)),
                           None if ids is None else spec(ids, [-1, -1]), **ATTRS)


@pytest.mark.parametrize("neox", [True, False])
def test_kernel_rotates_pairs(neox: bool) -> None:
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 3, 2, 4))
    with Graph("rope") as g:
        outs = ops.fused_rotary_position_embedding(g.input("q", [2, 3, 2, 4], "float64"), None,
                                                   None, None, None, None,
                                                   use_neox_rotary_style=neox,
                                                   rotary_emb_base=100.0)
    got = run_serial(g, {"q": q})[outs[0].name]
    want = np.empty_like(q)
    for s in range(3):
        for i in range(2):
            th = s * 100.0 ** (-2 * i / 4)
            a, b = ((2 * i, 2 * i + 1) if neox else (i, i + 2))
            want[:, s, :, a] = q[:, s, :, a] * np.cos(th) - q[:, s, :, b] * np.sin(th)
            want[:, s, :, b] = q[:, s, :, b] * np.cos(th) + q[:, s, :, a] * np.sin(th)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert outs[0].producer.attr_dict["rotary_emb_base"] == 100.0  # type: ignore[union-attr]


def test_deviation_rope_table_splits_size_one_dims() -> None:
    # fused_rotary_position_embedding/forward/9: Paddle keeps sin and cos [0, -1, 1, -1]
    q = spec([16, 1, 2, 64], [0, -1, 1, -1])
    t = spec([1, 1, 1, 64], [0, -1, 1, -1])
    paddle = sr.SpmdInfo([q.attr, q.attr, q.attr, t.attr, t.attr, None], [q.attr] * 3)
    args = [q, q, q, t, t, None]
    doms = ("real", "real", "real", "unit", "unit", None)
    assert execute("fused_rotary_position_embedding", args, paddle, ATTRS, doms) == "wrong"
    ours = ROPE.infer_forward(*args, **ATTRS)
    assert dms(ours)[3] == [-1, -1, -1, -1]
    assert execute("fused_rotary_position_embedding", args, ours, ATTRS, doms) == "ok"
