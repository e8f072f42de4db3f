"""Attributes set all at once (completion, reset_attrs), the annotated-tensor registry, and the
declared-tensor count behind validate(): each must read as if every tensor held its own."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.graph.annotate import shard
from spmdrules.graph.errors import ArityError, ProducerError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])


def _chain() -> Graph:
    with Graph("chain") as g:
        x = g.input("x", [8, 16])
        ops.exp(ops.relu(x, name="y"), name="z")
    shard(x, MESH, ("dp", None))
    return g


def test_completed_attrs_read_through_every_tensor() -> None:
    g = _chain()
    r = complete(g)
    assert all(t.attr == r.attr(t) for t in g.tensors)
    assert g.tensor("z").attr == sr.DistAttr(MESH, [0, -1])


def test_one_write_after_completion_keeps_the_others() -> None:
    g = _chain()
    complete(g)
    rep = sr.DistAttr(MESH, [-1, -1])
    g.tensor("y").attr = rep
    assert [t.attr for t in g.tensors] == [sr.DistAttr(MESH, [0, -1]), rep,
                                           sr.DistAttr(MESH, [0, -1])]


def test_growing_the_graph_after_completion_keeps_the_attrs() -> None:
    g = _chain()
    complete(g)
    with g:
        w = ops.relu(g.tensor("z"), name="w")
    assert w.attr is None
    assert g.tensor("x").attr == g.tensor("z").attr == sr.DistAttr(MESH, [0, -1])
    assert [t.name for t in g.tensors] == ["x", "y", "z", "w"]


def test_reset_attrs_keeps_annotation_seeds_only() -> None:
    g = _chain()
    complete(g)
    g.reset_attrs()
    assert [t.attr for t in g.tensors] == [sr.DistAttr(MESH, [0, -1]), None, None]


def test_set_attrs_needs_one_per_tensor() -> None:
    g = _chain()
    with pytest.raises(ArityError, match="set_attrs got 2 attributes for 3 tensors"):
        g.set_attrs([None, None])


def test_annotated_registry_follows_annotations() -> None:
    g = _chain()
    x, z = g.tensor("x"), g.tensor("z")
    shard(z, MESH, (None, "mp"))
    assert g.annotated() == (x, z)
    assert sorted(g.annotations(), key=lambda e: e[0]) == [(0, x.annotation), (2, z.annotation)]
    z.annotation = None
    assert g.annotated() == (x,)


def test_validate_finds_a_declared_tensor_until_it_is_produced() -> None:
    g = Graph("declared")
    x = g.input("x", [4])
    g.declare("y", [4])
    with pytest.raises(ProducerError, match="'y' was declared but no op produces it"):
        g.validate()
    g.add_op("relu", [x], results=["y"])
    g.validate()


def test_reset_attrs_needs_no_tensor_order() -> None:
    g = Graph("loop")
    a = g.declare("a", [4])
    g.declare("b", [4])
    g.add_op("relu", ["a"], name="f", results=["b"])
    g.add_op("exp", ["b"], name="h", results=["a"])          # a cycle: no topological order
    a.attr = sr.DistAttr(MESH, [0])
    assert g.reset_attrs() is g and a.attr is None
