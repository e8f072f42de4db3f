"""Repeated blocks holding ops visited through their ``Op`` (a list operand, an absent optional):
they have a signature by value (schema, attributes, the operands' structure), so the layers that
hold them still repeat, and replaying them changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from replay_checks import same_without_replay

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import index
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])


def _concat_stack(layers: int, marks: dict[str, tuple[Any, ...]] | None = None,
                  parts: Callable[[int], int] = lambda i: 2) -> Callable[[], Graph]:
    """Each layer: ``parts(layer)`` matmuls of the residual stream, concatenated (a list
    operand), added to the stream and a relu; ``marks`` annotates tensors by name besides the
    input."""
    def build() -> Graph:
        with Graph("concat_stack") as g:
            h = g.input("x", [8, 16])
            for i in range(layers):
                n = parts(i)
                pieces = [ops.matmul(h, g.param(f"l{i}.w{'ab'[j] if j < 2 else j}",
                                                 [16, 16 // n]), name=f"l{i}.{j}")
                          for j in range(n)]
                cat = ops.concat(pieces, axis=-1, name=f"l{i}.cat")
                h = ops.relu(ops.add(cat, h, name=f"l{i}.res"), name=f"l{i}.relu")
        shard(g.tensor("x"), MESH, ("dp", None))
        for name, spec in (marks or {}).items():
            shard(g.tensor(name), MESH, spec)
        return g

    return build


def _concats_in_blocks(g: Graph) -> int:
    ix = index.indices(g)
    cats = [op.order for op in g.ops if op.type == "concat"]
    assert all(ix.calls[k] is None and ix.odd[k] is not None for k in cats)
    return sum(1 for k in cats if ix.block_of[k] >= 0)


def test_a_stack_with_list_operands_repeats() -> None:
    layers = 8
    r = same_without_replay(_concat_stack(layers))
    # every layer but the first and the last is inside a block (a block starts after the
    # first layer's matmuls: their operand is the input)
    assert _concats_in_blocks(r.graph) >= layers - 2
    assert r.blocks_replayed > 0


@pytest.mark.parametrize("layer", [0, 3, 7])
@pytest.mark.parametrize("spec", [(None, "mp"), ("mp", None)])
def test_an_annotation_inside_one_layer_only(layer: int, spec: tuple[Any, ...]) -> None:
    r = same_without_replay(_concat_stack(8, {f"l{layer}.wa": spec}))
    assert _concats_in_blocks(r.graph) > 0


def test_list_operands_of_another_length_do_not_repeat() -> None:
    # the middle layer concatenates four pieces, the others two: its concat is no other's
    r = same_without_replay(_concat_stack(9, {"l1.wa": (None, "mp")},
                                          parts=lambda i: 4 if i == 4 else 2))
    g = r.graph
    ix = index.indices(g)
    wide = next(op.order for op in g.ops if op.name == "l4.cat")
    assert ix.block_of[wide] < 0 and ix.blocks and r.blocks_replayed > 0
    for b in ix.blocks:
        run = [c for c in ix.blocks if c.run == b.run]
        assert len({tuple(len(g.ops[k].inputs) for k in range(c.start, c.stop))
                    for c in run}) == 1


def test_op_keys_tell_attributes_apart_by_type() -> None:
    # an attribute 1 and 1.0 (or True) are not the same call: their keys differ
    ix = index._Calls()
    with Graph("keys") as g:
        x = g.input("x", [8, 16])
        op = ops.concat([x, x], axis=1, name="cat").producer
    assert op is not None
    keys = {ix.op_key(op.schema, (v,), op.operands, op.results) for v in (1, 1.0, True)}
    assert len(keys) == 3 and None not in keys
    nested = ix.op_key(op.schema, ([[1]],), op.operands, op.results)
    assert nested is None
