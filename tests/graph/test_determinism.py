"""A graph is a function of its content: insertion order changes neither equality nor op order."""

from __future__ import annotations

from typing import Any

import pytest
from graph_copies import rebuild_shuffled

import spmdrules as sr
from spmdrules import examples
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 2, "seq": 8, "hidden": 16, "heads": 2, "ffn": 32, "vocab": 64}


@pytest.mark.parametrize("seed", range(5))
def test_shuffled_insertion_gives_an_equal_graph_and_the_same_order(seed: int) -> None:
    src = examples.gpt_decoder(2, MESH, **SMALL)
    copy = rebuild_shuffled(src, seed)
    assert copy == src
    assert [op.name for op in copy.ops] == [op.name for op in src.ops]
    assert [t.name for t in copy.tensors] == [t.name for t in src.tensors]
    for t in src.tensors:
        c = copy.tensor(t.name)
        assert [o.name for o in copy.consumers(c)] == [o.name for o in src.consumers(t)]
        assert (c.producer and c.producer.name) == (t.producer and t.producer.name)
        assert c.index == t.index


def test_building_twice_gives_equal_graphs() -> None:
    assert examples.gpt_decoder(3, MESH, **SMALL) == examples.gpt_decoder(3, MESH, **SMALL)
    assert examples.mlp(MESH) == examples.mlp(MESH)


def test_content_differences_are_seen() -> None:
    a = examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16)
    b = examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16)
    shard(b.tensor("fc2.bias"), MESH, (None,))
    assert a != b
    c = examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16)
    shard(c.tensor("x"), MESH, ("dp", None, None), priority=1)
    assert a != c
    assert a != examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=32)
    assert a != examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16, annotate=False)


def test_graphs_pickle_and_copy() -> None:
    import copy
    import pickle

    src = examples.gpt_decoder(1, MESH, **SMALL)
    shard(src.tensor("layers.0.gelu"), MESH, ("dp", OPEN, "mp"), priority=3, partial=None)
    for clone in (pickle.loads(pickle.dumps(src)), copy.deepcopy(src)):
        assert clone == src and clone is not src
        assert [op.name for op in clone.ops] == [op.name for op in src.ops]
        assert clone.tensor("input_ids").graph is clone
        assert clone.op("loss").schema is src.op("loss").schema


def _natural_twins() -> sr.Graph:
    """Ops and tensors whose names are equal in natural order ('c1', 'c01', 'c001') and whose
    order decides a result: two transposes race to feed one add."""
    from spmdrules import ops
    from spmdrules.graph.graph import Graph

    with Graph("twins") as g:
        x = g.input("x01", [8, 8])
        y = g.input("x1", [8, 8])
        shard(x, MESH, ("dp", None))
        shard(y, MESH, ("dp", None))
        a = ops.transpose(x, perm=[1, 0], name="c1")
        b = ops.transpose(y, perm=[0, 1], name="c01")
        ops.add(a, b, name="c001")
    return g


@pytest.mark.parametrize("seed", range(6))
def test_names_equal_in_natural_order_still_have_one_order(seed: int) -> None:
    """issue 16, item 2: 'c1' and 'c01' compared equal, so the order (and a completion) followed
    the order of insertion."""
    from spmdrules.completion import complete

    src = _natural_twins()
    copy = rebuild_shuffled(src, seed)
    assert [op.name for op in copy.ops] == [op.name for op in src.ops]
    assert [t.name for t in copy.tensors] == [t.name for t in src.tensors]
    want = {t.name: complete(src).attr(t.name) for t in src.tensors}
    assert {t.name: complete(copy).attr(t.name) for t in copy.tensors} == want
