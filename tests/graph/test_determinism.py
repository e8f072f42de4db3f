"""A graph is a function of its content: insertion order changes neither equality nor op order."""

from __future__ import annotations

import random
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.annotate import OPEN, shard
from spmdrules.graph import Graph, Tensor

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 2, "seq": 8, "hidden": 16, "heads": 2, "ffn": 32, "vocab": 64}


def names(v: Tensor | tuple[Tensor, ...] | None) -> Any:
    if v is None or isinstance(v, Tensor):
        return None if v is None else v.name
    return [t.name for t in v]


def rebuild_shuffled(src: Graph, seed: int) -> Graph:
    """Declare every tensor, then add every op, each in a random order; copy the annotations."""
    rng = random.Random(seed)
    tensors = list(src.tensors)
    rng.shuffle(tensors)
    g = Graph(src.name)
    for t in tensors:
        make = {"input": g.input, "param": g.param, "value": g.declare}[t.role]
        make(t.name, t.shape, t.dtype)
    ops = list(src.ops)
    rng.shuffle(ops)
    for op in ops:
        g.add_op(op.type, [names(v) for v in op.operands], op.attr_dict, name=op.name,
                 results=[t.name for t in op.outputs])
    annotated = list(src.annotated())
    rng.shuffle(annotated)
    for t in annotated:
        ann = t.annotation
        assert ann is not None
        spec = [OPEN if d is None else d for d in ann.dims]
        closed = [i for i, c in enumerate(ann.closed) if c]
        shard(g.tensor(t.name), ann.mesh, spec, partial=dict(ann.partial), priority=ann.priority,
              closed=closed)
    return g.validate(full=True)


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
