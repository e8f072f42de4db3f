"""The op order and the builder's memo of bound ops.

``Graph.ops`` places each op as late as it can come, ties broken by natural name order; when the
ops sorted by name are already topological, the graph takes that order without building a
networkx graph. Both ways must give the order of the definition, computed the plain way.
"""

from __future__ import annotations

import random

import pytest

from spmdrules import ops
from spmdrules.graph.errors import GraphCycleError, OpAttributeError
from spmdrules.graph.graph import Graph
from spmdrules.graph.order import natural_key


def _random_dag(seed: int, n: int, names: str) -> Graph:
    """``n`` binary ops on random earlier tensors. ``names``: "counting" (names grow along the
    data flow, the shortcut applies), "random" (networkx sorts), "twins" (names equal in
    natural order: 'a1', 'a01', 'a001')."""
    rng = random.Random(seed)
    pool = list(range(n))
    rng.shuffle(pool)
    with Graph(f"dag{seed}") as g:
        live = [g.input(f"in{i}", [4, 4]) for i in range(3)]
        for k in range(n):
            if names == "counting":
                name = f"op{k}"
            elif names == "random":
                name = f"op{pool[k]}"
            else:
                name = "a" + "0" * rng.randrange(3) + str(pool[k] % (n // 3 + 1)) + f"_{k}" * (k % 2)
                if name in (o.name for o in g._ops.values()):
                    name += f"x{k}"
            a, b = rng.choice(live), rng.choice(live)
            live.append(ops.add(a, b, name=name))
    return g


def _latest_first_order(g: Graph) -> list[str]:
    """The order by its definition, the plain way: from the end, each step places the op with
    the greatest natural key among those whose every consumer is placed."""
    users: dict[str, set[str]] = {op.name: set() for op in g._ops.values()}
    for op in g._ops.values():
        for t in op.inputs:
            if t.producer is not None:
                users[t.producer.name].add(op.name)
    placed: list[str] = []
    while users:
        ready = [n for n, u in users.items() if not u]
        last = max(ready, key=natural_key)
        placed.append(last)
        del users[last]
        for u in users.values():
            u.discard(last)
    return placed[::-1]


@pytest.mark.parametrize("names", ["counting", "random", "twins"])
@pytest.mark.parametrize("seed", range(4))
def test_each_op_comes_as_late_as_it_can_ties_by_name(names: str, seed: int) -> None:
    g = _random_dag(seed, 60, names)
    assert [op.name for op in g.ops] == _latest_first_order(g)
    assert [op.order for op in g.ops] == list(range(g.num_ops))
    for op in g.ops:
        assert all(t.producer is None or t.producer.order < op.order for t in op.inputs)


def test_a_cycle_is_found_with_or_without_the_shortcut() -> None:
    g = Graph("loop")
    x = g.input("x", [4, 4])
    g.declare("b", [4, 4])
    g.add_op("add", [x, "b"], name="op1", results=["a"])
    g.add_op("relu", ["a"], name="op2", results=["b"])  # op1 reads b, which op2 makes from a
    with pytest.raises(GraphCycleError, match=r"op op1 -> op2 -> op1|op op2 -> op1 -> op2"):
        g.validate()


def test_nx_is_the_bipartite_view_and_follows_changes() -> None:
    with Graph("view") as g:
        x = g.input("x", [4, 4])
        y = ops.relu(x, name="r")
    first = g.nx
    assert set(first.successors(x)) == {g.op("r")} and set(first.successors(g.op("r"))) == {y}
    assert g.nx is first  # kept while the graph stays the same
    ops.add(y, y, name="twice")
    assert g.nx is not first and set(g.nx.predecessors(g.op("twice"))) == {y}
    assert g.consumers(y) == (g.op("twice"),)  # read twice, listed once


def test_the_bind_memo_keys_attributes_by_type() -> None:
    """Ops bound before answer from a memo; 0.0 equals False and hashes the same, so the key
    carries each value's type, and the cold and warm calls fail alike."""
    with Graph("memo") as g:
        x, y = g.input("x", [4, 8]), g.input("y", [8, 2])
        g.add_op("matmul", [x, y], {"trans_x": False, "trans_y": False}, name="ok")
        with pytest.raises(OpAttributeError, match="attribute 'trans_x' must be a bool"):
            g.add_op("matmul", [x, y], {"trans_x": 0.0, "trans_y": False}, name="bad")
        t = g.input("t", [4, 8])
        g.add_op("transpose", [t], {"perm": [1, 0]}, name="p1")
        with pytest.raises(OpAttributeError, match="attribute 'perm'"):
            g.add_op("transpose", [t], {"perm": [1.0, 0.0]}, name="p2")
        # same attributes, other shapes: bound afresh, so shape errors name their own op
        z = g.input("z", [3, 8])
        with pytest.raises(Exception, match="op 'mm2'"):
            g.add_op("matmul", [z, z], {"trans_x": False, "trans_y": False}, name="mm2")
