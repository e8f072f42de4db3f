"""The choice of one strategy per op as a mixed-integer linear program (scipy's HiGHS).

Variables: ``x[v, s]`` (binary) picks strategy ``s`` of node ``v`` (an op, or a source tensor's
layout); each tensor edge from a producer (its result laid out ``a``) to a consumer (which needs
it as ``r``) has a transport ``y[a, r] >= 0`` whose rows sum to the producer's choice of ``a``
and whose columns sum to the consumer's choice of ``r``, so with ``x`` integral exactly one
``y`` is 1: the reshard ``a -> r``. The objective is the step time (the nodes' compute and
gradient all-reduces, the edges' reshards), or the memory; memory per rank (the nodes'
activations and parameters, the edges' reshard buffers) is bounded by the budget. Each node is
a representative of the ops it stands for (``quotient``) and counts that many times.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from spmdrules.auto import cost as cm
from spmdrules.auto.candidates import Strategy, strategies
from spmdrules.auto.quotient import Quotient, fold
from spmdrules.completion.memory import local_bytes
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

Objective = Literal["time", "memory"]
#: seconds HiGHS may take for one mesh (then its best plan so far is taken)
TIME_LIMIT: Final = 30.0
#: the relative gap at which HiGHS stops: a plan within 0.5% of the optimum's bound
MIP_GAP: Final = 5e-3


@dataclass(frozen=True, slots=True)
class Choice:
    """The solver's answer on one mesh: each op's strategy (``Graph.ops`` order), each source
    tensor's layout, and the predicted time and memory of that assignment."""

    mesh: ProcessMesh
    ops: tuple[Strategy, ...]
    sources: dict[str, DistAttr]
    time: float
    memory: float


@dataclass(slots=True)
class _Model:
    cost: list[float]
    mem: list[float]
    integral: list[int]
    rows: list[int]
    cols: list[int]
    vals: list[float]
    lo: list[float]
    hi: list[float]
    upper: list[float]

    def var(self, time: float, mem: float, integral: bool) -> int:
        self.cost.append(time)
        self.mem.append(mem)
        self.integral.append(int(integral))
        self.upper.append(0.0 if math.isinf(time) else 1.0)
        return len(self.cost) - 1

    def row(self, entries: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(self.lo)
        for c, v in entries:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lo.append(lo)
        self.hi.append(hi)


class Infeasible(Exception):
    """No assignment on this mesh fits the budget (the search reports it across meshes)."""

    def __init__(self, floor: float) -> None:
        super().__init__(floor)
        self.floor = floor


def solve(g: Graph, mesh: ProcessMesh, budget: float, opts: cm.Options,
          objective: Objective = "time", quotient: Quotient | None = None) -> Choice:
    """The best assignment of ``g``'s ops on ``mesh`` within ``budget`` bytes per rank."""
    q = quotient or fold(g)
    ops, tensors = g.ops, g.tensors
    m = _Model([], [], [], [], [], [], [], [], [])
    cands: dict[int, tuple[Strategy, ...]] = {}
    xs: dict[int, list[int]] = {}
    for k, op in enumerate(ops):
        if q.rep[k] != k:
            continue
        w = q.weight[k]
        cands[k] = cs = strategies(op, mesh)
        xs[k] = [m.var(w * (cm.compute_time(op, s.split, opts)
                             + cm.gradient_sync_time(op, s.inputs, s.work_dims, opts)),
                       w * sum(local_bytes(a, t.shape, t.dtype)
                               for a, t in zip(s.outputs, op.outputs, strict=True)), True)
                 for s in cs]
        m.row([(v, 1.0) for v in xs[k]], 1.0, 1.0)
    # source tensors: replicated or any layout a consumer's candidate reads them in
    layouts: dict[int, list[DistAttr]] = defaultdict(list)
    for k, op in enumerate(ops):
        for j, t in enumerate(op.inputs):
            if t.producer is None and q.rep_tensor[t.order] == t.order:
                seen = layouts[t.order]
                for s in cands[q.rep[k]]:
                    if s.inputs[j] not in seen:
                        seen.append(s.inputs[j])
    src_x: dict[int, list[int]] = {}
    for i, ls in layouts.items():
        t = tensors[i]
        rep = DistAttr.replicated(mesh, t.ndim)
        if rep not in ls:
            ls.insert(0, rep)
        w = q.tensor_weight[i]
        src_x[i] = [m.var(0.0, w * _source_bytes(a, t, opts), True) for a in ls]
        m.row([(v, 1.0) for v in src_x[i]], 1.0, 1.0)
    # edges, folded: (producer node, result slot or -1 for a source, consumer node, slot)
    edges: dict[tuple[int, int, int, int], int] = defaultdict(int)
    for k, op in enumerate(ops):
        for j, t in enumerate(op.inputs):
            if t.producer is None:
                edges[(-1, q.rep_tensor[t.order], q.rep[k], j)] += 1
            else:
                edges[(q.rep[t.producer.order], t.index, q.rep[k], j)] += 1
    for (p, slot, c, j), w in edges.items():
        t = ops[c].inputs[j]
        if p < 0:
            made = {a: [v] for a, v in zip(layouts[slot], src_x[slot], strict=True)}
        else:
            made = _group([s.outputs[slot] for s in cands[p]], xs[p])
        need = _group([s.inputs[j] for s in cands[c]], xs[c])
        _transport(m, t, made, need, w, opts)
    return _run(g, mesh, m, q, cands, xs, layouts, src_x, budget, objective)


def _source_bytes(a: DistAttr, t: Tensor, opts: cm.Options) -> int:
    """A source's bytes per rank: a parameter's with its gradient and optimizer state."""
    return cm.param_bytes(a, t, opts) if t.role == "param" else local_bytes(a, t.shape, t.dtype)


def _group(attrs: Sequence[DistAttr], xs: Sequence[int]) -> dict[DistAttr, list[int]]:
    out: dict[DistAttr, list[int]] = defaultdict(list)
    for a, v in zip(attrs, xs, strict=True):
        out[a].append(v)
    return out


_EDGE_PRICES: dict[Any, list[tuple[float, int]]] = {}


def _transport(m: _Model, t: Tensor, made: dict[DistAttr, list[int]],
               need: dict[DistAttr, list[int]], w: int, opts: cm.Options) -> None:
    key = (t.shape, t.dtype, tuple(made), tuple(need), opts)
    prices = _EDGE_PRICES.get(key)
    if prices is None:  # a model repeats its edges' shapes and layouts: price each set once
        prices = _EDGE_PRICES[key] = [
            (cm.edge_time(a, r, t, opts), 0 if a == r else local_bytes(r, t.shape, t.dtype))
            for a in made for r in need]
    y: dict[tuple[DistAttr, DistAttr], int] = {}
    for (a, r), (time, buf) in zip(itertools.product(made, need), prices, strict=True):
        y[(a, r)] = m.var(w * time, w * buf, False)
    for a, vs in made.items():
        m.row([(y[(a, r)], 1.0) for r in need] + [(v, -1.0) for v in vs], 0.0, 0.0)
    for r, vs in need.items():
        m.row([(y[(a, r)], 1.0) for a in made] + [(v, -1.0) for v in vs], 0.0, 0.0)


def _run(g: Graph, mesh: ProcessMesh, m: _Model, q: Quotient,
         cands: dict[int, tuple[Strategy, ...]], xs: dict[int, list[int]],
         layouts: dict[int, list[DistAttr]], src_x: dict[int, list[int]], budget: float,
         objective: Objective) -> Choice:
    n = len(m.cost)
    time = np.array([0.0 if math.isinf(c) else c for c in m.cost])
    mem = np.array(m.mem)
    a = coo_array((m.vals, (m.rows, m.cols)), shape=(len(m.lo), n)).tocsr()
    cons = [LinearConstraint(a, np.array(m.lo), np.array(m.hi))]
    if math.isfinite(budget):
        cons.append(LinearConstraint(mem.reshape(1, -1), -np.inf, budget))
    c = time if objective == "time" else mem + 1e-9 * time
    res = milp(c, integrality=np.array(m.integral), bounds=Bounds(0, np.array(m.upper)),
               constraints=cons, options={"time_limit": TIME_LIMIT, "mip_rel_gap": MIP_GAP})
    if res.x is None:
        floor = _floor(m, xs, src_x)
        raise Infeasible(floor)
    x = res.x
    pick = {k: int(np.argmax([x[v] for v in vs])) for k, vs in xs.items()}
    ops = tuple(cands[q.rep[k]][pick[q.rep[k]]] for k in range(len(g.ops)))
    sources: dict[str, DistAttr] = {}
    for t in g.tensors:
        if t.producer is None and t.consumers:
            r = q.rep_tensor[t.order]
            if r in src_x:
                sources[t.name] = layouts[r][int(np.argmax([x[v] for v in src_x[r]]))]
    return Choice(mesh, ops, sources, float(time @ x), float(mem @ x))


def _floor(m: _Model, xs: dict[int, list[int]], src_x: dict[int, list[int]]) -> float:
    """A lower bound of any assignment's memory: each node's smallest option."""
    return sum(min(m.mem[v] for v in vs) for vs in (*xs.values(), *src_x.values()))
