"""The order of a graph's ops: topological, each op as late as it can come, ties broken by name,
so it depends on the graph's content alone (never on the order in which ops were added or listed
in a file).

Why as late as it can: an op then comes right before its first reader, so the ops of one layer of
a model stay together whatever they are called. A weight's transpose is emitted in the layer that
uses it, not with every other layer's transposes ahead of the first layer, and a rotary table or a
mask that every layer reads comes just before the first layer that reads it. The completion pass
finds and replays repeated layers only where they are contiguous (``completion.blocks``)."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Final

from spmdrules.core.spec import flat_slots
from spmdrules.graph.errors import GraphCycleError
from spmdrules.graph.nodes import Op, Tensor

if TYPE_CHECKING:  # networkx loads where a graph is sorted or viewed, not in every MPI rank
    import networkx as nx

_DIGITS: Final = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """'layer10' after 'layer9': strings at even positions, ints at odd ones, so keys compare;
    then the name itself, so that names equal in natural order ('c1', 'c01') still have one
    order: a total order, so the result never depends on insertion order."""
    parts: list[str | int] = list(_DIGITS.split(name))
    parts[1::2] = map(int, parts[1::2])
    return tuple(parts), name


def lexicographic_order(ops: Collection[Op], graph: str) -> tuple[Op, ...]:
    """``ops`` in topological order (each after the producers of its operands), built from the
    end: each step places, last, the op with the greatest ``natural_key`` among those whose
    readers are all placed. That is networkx's lexicographical topological sort of the reversed
    dependency graph, greatest key first, read backwards. Sets ``Op.order``. A cycle raises
    ``GraphCycleError`` naming ``graph`` and the cycle.

    When the ops sorted by key are already in topological order, that sorted order is the
    result itself (at each step the greatest remaining op has no reader left), so no graph is
    built: models whose names count up along the data flow (``layers.0`` ... ``layers.31``, a
    generated chain) skip networkx."""
    keys = {op: natural_key(op.name) for op in ops}
    ranked = sorted(keys, key=keys.__getitem__)
    for i, op in enumerate(ranked):
        op.order = i
    if all(t.producer.order < op.order for op in ranked
           for t in flat_slots(op.operands, Tensor) if t.producer is not None):
        return tuple(ranked)
    import networkx as nx

    rank = {op: -i for i, op in enumerate(ranked)}
    deps = nx.DiGraph()
    deps.add_nodes_from(ranked)
    deps.add_edges_from((op, t.producer) for op in ranked
                        for t in flat_slots(op.operands, Tensor) if t.producer is not None)
    try:
        order = tuple(nx.lexicographical_topological_sort(deps, key=rank.__getitem__))[::-1]
    except nx.NetworkXUnfeasible:
        tensors = {t for op in ops for t in (*flat_slots(op.operands, Tensor),
                                             *flat_slots(op.results, Tensor))}
        raise cycle_error(graph, bipartite_view(tensors, ops)) from None
    for i, op in enumerate(order):
        op.order = i
    return order


def bipartite_view(tensors: Collection[Tensor], ops: Collection[Op]) -> nx.DiGraph:
    """The graph as a networkx DiGraph: Op and Tensor objects are its nodes, with an edge
    tensor -> op for each operand and op -> tensor for each result."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(tensors)
    g.add_nodes_from(ops)
    g.add_edges_from((t, op) for t in tensors for op in t.readers)
    g.add_edges_from((t.producer, t) for t in tensors if t.producer is not None)
    return g


def cycle_error(graph: str, view: nx.DiGraph) -> GraphCycleError:
    """The error for a cycle of ``view`` (``bipartite_view``), naming its ops and tensors."""
    import networkx as nx

    edges = nx.find_cycle(view)
    ops = [u.name for u, _ in edges if isinstance(u, Op)]
    via = [u.name for u, _ in edges if isinstance(u, Tensor)]
    return GraphCycleError(
        f"graph {graph!r} has a cycle: op {' -> '.join(ops + ops[:1])} (through tensors "
        f"{', '.join(via)}); an op may not consume, directly or through other ops, a tensor it "
        f"produces. Give the fed-back value of op {ops[0]!r} a new tensor instead"
    )
