"""The simulated mesh used for proofs by execution."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spmdrules as sr
from spmdrules.core.shards import ShardMismatch, balanced_range, gather, run_local, scatter

MESH = sr.ProcessMesh([[0, 1, 2], [3, 4, 5]])


def test_balanced_decomposition_matches_contract() -> None:
    # n=10 over 4: sizes 3,3,2,2 starting at 0,3,6,8
    assert [balanced_range(10, 4, i) for i in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 7), min_size=2, max_size=2),
    st.sampled_from([[0, 1], [1, -1], [-1, -1], [-1, 0]]),
    st.sampled_from([{}, {0: "sum"}, {1: "max"}, {0: "avg"}, {1: "min"}, {1: "product"}]),
)
def test_scatter_gather_round_trip(
    shape: list[int], dm: list[int], partial: dict[int, str]
) -> None:
    used = {d for d in dm if d >= 0}
    if used & set(partial):
        return
    attr = sr.DistAttr(MESH, dm, partial)
    x = np.random.default_rng(1).standard_normal(shape)
    back = gather(scatter(x, attr), shape, attr)
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)


def test_boolean_partials() -> None:
    x = np.random.default_rng(2).integers(0, 2, (4, 3)) > 0
    for rt in ("any", "all"):
        attr = sr.DistAttr(MESH, [-1, -1], {1: rt})
        assert (gather(scatter(x, attr), x.shape, attr) == x).all()


def test_co_shard_is_mixed_radix_major_first() -> None:
    attr = sr.DistAttr(MESH, multi_dims_mapping=[[0, 1]])
    blocks = scatter(np.arange(6), attr)
    # 6 parts: coordinate (a, b) holds part a*3 + b
    assert {c: int(b[0]) for c, b in blocks.items()} == {
        (0, 0): 0,
        (0, 1): 1,
        (0, 2): 2,
        (1, 0): 3,
        (1, 1): 4,
        (1, 2): 5,
    }


def test_wrong_attribute_is_caught() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((6, 3))
    ins = [(a, sr.DistAttr(MESH, [-1, 1])), (b, sr.DistAttr(MESH, [1, -1]))]
    out = run_local(lambda p, q: p @ q, ins)
    good = gather(out, (4, 3), sr.DistAttr(MESH, [-1, -1], {1: "sum"}))
    np.testing.assert_allclose(good, a @ b)
    with pytest.raises(ShardMismatch, match="replicas disagree"):
        gather(out, (4, 3), sr.DistAttr(MESH, [-1, -1]))
