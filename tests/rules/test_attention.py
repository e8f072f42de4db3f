"""flash_attention: Paddle's behaviour, grouped-query heads, typed errors, the kernel against a
direct formula, and the deviations proven by execution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError, UnsupportedError
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
FA = sr.get_rule("flash_attention")
DOMAINS = ("real", "real", "real", None, "real")
ATTRS = {"dropout": 0.0, "causal": False, "return_softmax": False, "is_test": True}


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[Any]:
    return [None if a is None else list(a.dims_mapping)  # type: ignore[union-attr]
            for a in (*info.inputs, *info.outputs)]


def test_batch_and_heads_split_sequences_and_head_dims_whole() -> None:
    q, k, v = spec([2, 4, 12, 8], [1, 0, -1, -1]), spec([2, 6, 12, 8], [-1, -1, 0, 1]), \
        spec([2, 6, 12, 8], [-1, 1, 0, -1])
    # q's seq shard and k's head-dim shard are dropped; v's own layout is not asked
    info = FA.infer_forward(q, k, v, None, None, 0.0, True, False, False)
    assert dms(info) == [[1, -1, 0, -1]] * 3 + [None, None, [1, -1, 0, -1], [1, 0, -1, -1],
                                                 [1, 0, -1], [-1]]


def test_a_mask_broadcast_over_heads_merges_but_is_not_split() -> None:
    q = spec([4, 3, 8, 2], [-1, -1, -1, -1])
    mask = spec([4, 1, 3, 5], [0, 1, -1, -1])
    info = FA.infer_forward(q, spec([4, 5, 8, 2], [-1] * 4), spec([4, 5, 8, 2], [-1] * 4), None,
                            mask, **ATTRS)
    assert dms(info)[0] == [0, -1, 1, -1] and dms(info)[4] == [0, -1, -1, -1]


def test_grouped_query_heads_split_only_where_both_counts_divide() -> None:
    k = spec([2, 5, 2, 4], [-1, -1, 0, -1])
    info = FA.infer_forward(spec([2, 3, 8, 4], [-1] * 4), k, k, None, None, **ATTRS)
    assert dms(info)[0] == [-1, -1, 0, -1]  # 2 kv heads on 2 ranks: 4 q heads each
    k1 = spec([2, 5, 1, 4], [-1, -1, 0, -1])
    info = FA.infer_forward(spec([2, 3, 8, 4], [-1, -1, 0, -1]), k1, k1, None, None, **ATTRS)
    assert dms(info)[0] == [-1, -1, -1, -1]  # one kv head cannot be split


def test_reverse_reads_v_and_softmax_lse() -> None:
    q, k = spec([4, 6, 16, 6], [-1] * 4), spec([4, 6, 4, 6], [-1] * 4)
    out, sm = spec([4, 6, 16, 6], [-1, -1, -1, -1]), spec([4, 16, 6, 6], [-1, -1, 1, 0])
    lse = spec([4, 16, 6], [0, 1, -1])
    info = FA.infer_reverse(q, k, k, None, None, out, sm, lse, spec([2], [-1]), **ATTRS)
    assert dms(info) == [[0, -1, 1, -1]] * 3 + [None, None, [0, -1, 1, -1], [0, 1, -1, -1],
                                                 [0, 1, -1], [-1]]


@pytest.mark.parametrize("q,k,v,why", [
    ([2, 3, 4], [2, 3, 4, 2], [2, 3, 4, 2], "4-D"),
    ([2, 3, 4, 2], [3, 3, 4, 2], [2, 3, 4, 2], "batch"),
    ([2, 3, 6, 2], [2, 3, 4, 2], [2, 3, 4, 2], "multiple"),
    ([2, 3, 4, 2], [2, 3, 4, 3], [2, 3, 4, 2], "head dim"),
    ([2, 3, 4, 2], [2, 3, 4, 2], [2, 5, 4, 2], "seq_len_kv"),
])
def test_bad_shapes_are_typed_errors_naming_the_tensor(q: list[int], k: list[int], v: list[int],
                                                       why: str) -> None:
    with pytest.raises(RuleArgumentError, match=why):
        FA.infer_forward(spec(q, [-1] * len(q)), spec(k, [-1] * 4), spec(v, [-1] * 4), None,
                         None, **ATTRS)


def test_one_dim_split_two_ways_is_a_conflict() -> None:
    with pytest.raises(ShardingConflictError, match="'a'"):
        FA.infer_forward(spec([4, 3, 4, 2], [0, -1, -1, -1]), spec([4, 3, 4, 2], [1, -1, -1, -1]),
                         spec([4, 3, 4, 2], [-1] * 4), None, None, **ATTRS)


def _reference(q: Any, k: Any, v: Any, mask: Any, causal: bool) -> Any:
    g = q.shape[2] // k.shape[2]
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    out = np.zeros((*q.shape[:3], v.shape[3]))
    for b in range(q.shape[0]):
        for h in range(q.shape[2]):
            s = q[b, :, h] @ kk[b, :, h].T / np.sqrt(q.shape[3])
            if mask is not None:
                s = s + mask[min(b, mask.shape[0] - 1), min(h, mask.shape[1] - 1)]
            if causal:
                sq, skv = s.shape
                s = np.where(np.arange(skv)[None] <= np.arange(sq)[:, None] + skv - sq, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[b, :, h] = (p / p.sum(axis=1, keepdims=True)) @ vv[b, :, h]
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_is_scaled_dot_product_attention(causal: bool) -> None:
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 4, 2, 5)), \
        rng.standard_normal((2, 4, 2, 3))
    mask = rng.standard_normal((2, 1, 3, 4))
    with Graph("fa") as g:
        o = ops.flash_attention(g.input("q", list(q.shape), "float64"),
                                g.input("k", list(k.shape), "float64"),
                                g.input("v", list(v.shape), "float64"), None,
                                g.input("m", list(mask.shape), "float64"), causal=causal)
    got = run_serial(g, {"q": q, "k": k, "v": v, "m": mask})
    np.testing.assert_allclose(got[o[0].name], _reference(q, k, v, mask, causal), atol=1e-12)


def test_the_op_carries_every_attribute_and_refuses_training_dropout() -> None:
    with Graph("fa") as g:
        q = g.input("q", [1, 2, 2, 2], "float64")
        o = ops.flash_attention(q, q, q, None, None, dropout=0.5, rng_name="local_seed")
    assert o[0].producer.attr_dict["rng_name"] == "local_seed"  # type: ignore[union-attr]
    assert o[2].dtype == "float64" and o[3].dtype == "int64" and o[1].shape == (1, 2, 2, 2)
    with pytest.raises(UnsupportedError, match="is_test"):
        run_serial(g, {"q": np.ones((1, 2, 2, 2))})


# ---- deviations, proven by execution ----------------------------------------------------------
def test_deviation_flash_attention_gqa_heads_split() -> None:
    # flash_attention/forward/47: one kv head; q's mask splits the heads over mesh dim 0
    q, k, v = spec([6, 8, 4, 4], [-1, 0, -1, -1]), spec([6, 8, 1, 4], [-1, 0, -1, -1]), \
        spec([6, 8, 1, 4], [-1, -1, -1, 0])
    mask = spec([6, 1, 8, 8], [-1, 0, -1, -1])
    paddle = sr.SpmdInfo(
        [sr.DistAttr(MESH, [-1, -1, 0, -1])] * 3 + [None, sr.DistAttr(MESH, [-1] * 4)],
        [sr.DistAttr(MESH, m) for m in ([-1, -1, 0, -1], [-1, 0, -1, -1], [-1, 0, -1], [-1])])
    assert execute("flash_attention", [q, k, v, None, mask], paddle, ATTRS, DOMAINS) == "wrong"
    ours = FA.infer_forward(q, k, v, None, mask, **ATTRS)
    assert dms(ours)[0] == [-1, -1, -1, -1]
    assert execute("flash_attention", [q, k, v, None, mask], ours, ATTRS, DOMAINS) == "ok"


def test_deviation_flash_attention_reverse_echoes_softmax() -> None:
    # flash_attention/reverse/9: Paddle keeps softmax [-1, 1, 0, 2] (seq dims split)
    mesh = sr.ProcessMesh([[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
    t = sr.TensorSpec([4, 4, 6, 6], sr.DistAttr(mesh, [1, -1, 2, -1]))
    qkv = sr.DistAttr(mesh, [1, -1, 2, -1])
    paddle = sr.SpmdInfo([qkv, qkv, qkv, None, None], [
        qkv, sr.DistAttr(mesh, [-1, 1, 0, 2]), sr.DistAttr(mesh, [1, 2, -1]),
        sr.DistAttr(mesh, [-1])])
    assert execute("flash_attention", [t, t, t, None, None], paddle, ATTRS, DOMAINS) == "wrong"
    out = sr.TensorSpec([4, 4, 6, 6], sr.DistAttr(mesh, [1, -1, 2, 0]))
    ours = FA.infer_reverse(t, t, t, None, None, out,
                            sr.TensorSpec([4, 6, 4, 4], sr.DistAttr(mesh, [-1, 1, 0, 2])),
                            sr.TensorSpec([4, 6, 4], sr.DistAttr(mesh, [1, 2, -1])),
                            sr.TensorSpec([2], sr.DistAttr(mesh, [-1])), **ATTRS)
    assert dms(ours)[6] == [1, 2, -1, -1]
    fwd = sr.SpmdInfo(list(ours.inputs), list(ours.outputs))
    assert execute("flash_attention", [t, t, t, None, None], fwd, ATTRS, DOMAINS) == "ok"


def test_reverse_seed_offset_paddle_s_placeholder_is_a_format() -> None:
    # Paddle answers the [2] seed_offset with fixed_seed_offset's attribute: rank 0, or no mesh.
    # As written that lays out nothing; read as ours (formats.PLACEHOLDER: the kernel writes the
    # pair whole on every process) Paddle's answer is ours, which executes
    q = spec([2, 3, 2, 2], [0, -1, -1, -1])
    ours = FA.infer_reverse(q, q, q, None, None, q, spec([2, 2, 3, 3], [0, -1, -1, -1]),
                            spec([2, 2, 3], [0, -1, -1]), spec([2], [-1]), **ATTRS)
    seed = ours.outputs[3]
    assert seed is not None and seed.dims_mapping == (-1,)  # type: ignore[union-attr]
    assert execute("flash_attention", [q, q, q, None, None], ours, ATTRS, DOMAINS) == "ok"
    paddle = sr.SpmdInfo(list(ours.inputs), [*ours.outputs[:3], sr.DistAttr(MESH, [])])
    assert execute("flash_attention", [q, q, q, None, None], paddle, ATTRS, DOMAINS) != "ok"
