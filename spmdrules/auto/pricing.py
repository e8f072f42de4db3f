"""Reshard prices for the solver: the planner's steps, one shortest-path row per layout.

``plan_reshard`` searches the layouts reachable from its source for each pair it is asked; the
solver asks for every pair of a tensor's candidate layouts, on every edge. So the state graph
of one tensor kind (shape, dtype, mesh) is built once from the planner's own steps
(``reshard_plans.transitions``, priced by the same calibrated ``CostModel``), its layouts
numbered, and each source gets one row of distances to every layout, from scipy's compiled
Dijkstra over the graph as a sparse matrix (a model asks for thousands of sources on a 3-D mesh:
a Python Dijkstra over ``DistAttr`` keys took most of the solve). The candidates split evenly
and ask only for the pending sums their producers make, so the planner's extra routes (uneven
slices, box exchanges, ``zero_partial``) never apply; a masked pending sum moves as its plain
sum (``reshard_plans._masked_plan``), and no reshard makes one. The memos are bounded
(``MAX_KINDS`` tensor kinds per cost model, ``MAX_COST_MODELS`` cost models), so a process that
plans many models keeps the most recent.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import dijkstra

from spmdrules.completion.cost import CostModel
from spmdrules.completion.reshard_plans import transitions
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh

Kind = tuple[tuple[int, ...], str]
#: tensor kinds (shape, dtype, mesh) whose state graphs one cost model's memo keeps: a model
#: has a few hundred; the least recently asked is dropped, and rebuilt if asked again
MAX_KINDS: Final = 1024
MAX_COST_MODELS: Final = 8


@dataclass(slots=True)
class _States:
    """The layouts of one tensor kind reached so far, numbered, and the planner's cheapest step
    between each pair (``steps[(i, j)]``). Every layout numbered has all its steps, so the
    layouts reachable from one are numbered with it and a row of distances, once computed,
    stays true as the graph grows from other sources."""

    index: dict[DistAttr, int] = field(default_factory=dict)
    steps: dict[tuple[int, int], float] = field(default_factory=dict)
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    matrix: csr_array | None = None

    def number(self, a: DistAttr) -> int:
        i = self.index.get(a)
        if i is None:
            i = self.index[a] = len(self.index)
            self.matrix = None
        return i

    def graph(self) -> csr_array:
        if self.matrix is None:
            n = len(self.index)
            ij = np.array(list(self.steps), dtype=np.int64).reshape(-1, 2)
            # a free step (a local slice) is an explicit 0, which csgraph keeps as an edge
            w = np.fromiter(self.steps.values(), float, len(self.steps))
            self.matrix = csr_array((w, (ij[:, 0], ij[:, 1])), shape=(n, n))
        return self.matrix


@dataclass(slots=True)
class Prices:
    """Seconds of the cheapest plan between two layouts of a tensor kind, memoised."""

    cost: CostModel
    states: Callable[[Kind, ProcessMesh], _States] = field(init=False)

    def __post_init__(self) -> None:
        # the states of a kind, one object per kind while it stays in the bounded memo
        self.states = functools.lru_cache(maxsize=MAX_KINDS)(lambda _k, _m: _States())

    def time(self, src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str) -> float:
        if not set(dst.mask_items) <= set(src.mask_items):
            return math.inf  # a mask says where the zeros are: only the op that made them knows
        src, dst = src.without_masks(), dst.without_masks()
        if src == dst:
            return 0.0
        kind = (shape, dtype)
        st = self.states(kind, src.mesh)
        i = st.index.get(src)
        if i is None:
            i = self._grow(st, src, kind)
        row = st.rows.get(i)
        if row is None:
            row = st.rows[i] = dijkstra(st.graph(), indices=i)
        j = st.index.get(dst)
        if j is None or j >= len(row):
            return math.inf  # not reachable from src (numbered later, from another source)
        d = float(row[j])
        return d if math.isfinite(d) else math.inf

    def _grow(self, st: _States, start: DistAttr, kind: Kind) -> int:
        """Number every layout reachable from ``start`` and record its steps."""
        shape, dtype = kind
        first = st.number(start)
        todo = [start]
        while todo:
            a = todo.pop()
            i = st.index[a]
            for s in transitions(a, shape, dtype, self.cost):
                fresh = s.dst not in st.index
                j = st.number(s.dst)
                old = st.steps.get((i, j))
                if old is None or old > s.time:
                    st.steps[(i, j)] = s.time
                if fresh:
                    todo.append(s.dst)
        return first


@functools.lru_cache(maxsize=MAX_COST_MODELS)
def prices(cost: CostModel) -> Prices:
    """The memo of one cost model's prices."""
    return Prices(cost)
