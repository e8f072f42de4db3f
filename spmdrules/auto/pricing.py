"""Reshard prices for the solver: the planner's steps, one shortest-path tree per layout.

``plan_reshard`` searches the layouts reachable from its source for each pair it is asked; the
solver asks for every pair of a tensor's candidate layouts, on every edge. So the state graph
of one tensor kind (shape, dtype, mesh) is built once from the planner's own steps
(``reshard_plans.transitions``, priced by the same calibrated ``CostModel``) and each source gets one
Dijkstra tree (networkx) to every layout. The candidates split evenly and ask for no pending
sum, so the planner's extra routes (uneven slices, box exchanges, ``zero_partial``) never
apply; a masked pending sum moves as its plain sum (``reshard_plans._masked_plan``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import networkx as nx

from spmdrules.completion.cost import CostModel
from spmdrules.completion.reshard_plans import transitions
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh

Kind = tuple[tuple[int, ...], str]


@dataclass(slots=True)
class Prices:
    """Seconds of the cheapest plan between two layouts of a tensor kind, memoised."""

    cost: CostModel
    _graphs: dict[tuple[Kind, ProcessMesh], tuple[nx.DiGraph, set[DistAttr]]] = field(
        default_factory=dict)
    _trees: dict[tuple[Kind, DistAttr], dict[DistAttr, float]] = field(default_factory=dict)

    def time(self, src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str) -> float:
        src, dst = src.without_masks(), dst.without_masks()
        if src == dst:
            return 0.0
        kind = (shape, dtype)
        tree = self._trees.get((kind, src))
        if tree is None:
            tree = self._trees[(kind, src)] = self._tree(src, kind)
        return tree.get(dst, math.inf)

    def _tree(self, src: DistAttr, kind: Kind) -> dict[DistAttr, float]:
        g, grown = self._graphs.setdefault((kind, src.mesh), (nx.DiGraph(), set()))
        if src not in grown:
            self._grow(g, grown, src, kind)
        return dict(nx.single_source_dijkstra_path_length(g, src, weight="w"))

    def _grow(self, g: nx.DiGraph, grown: set[DistAttr], start: DistAttr, kind: Kind) -> None:
        """Every layout reachable from ``start`` and its steps, once per layout."""
        shape, dtype = kind
        g.add_node(start)
        grown.add(start)
        todo = [start]
        while todo:
            a = todo.pop()
            for s in transitions(a, shape, dtype, self.cost):
                old = g.get_edge_data(a, s.dst)
                if old is None or old["w"] > s.time:
                    g.add_edge(a, s.dst, w=s.time)
                if s.dst not in grown:
                    grown.add(s.dst)
                    todo.append(s.dst)


@functools.cache
def prices(cost: CostModel) -> Prices:
    """The memo of one cost model's prices."""
    return Prices(cost)
