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

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from spmdrules.auto import cost as cm
from spmdrules.auto.candidates import MEMO_SIZE, Pending, Strategy, pending_pieces, strategies
from spmdrules.auto.quotient import Quotient, fold
from spmdrules.completion.memory import local_bytes
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor

Objective = Literal["time", "memory"]
#: branch-and-bound nodes HiGHS may explore on one mesh, then its best plan so far is taken: a
#: bound on work, not on wall time, so the plan does not depend on the machine's load (every
#: bench model's program is solved at the root node)
NODE_LIMIT: Final = 1000
#: seconds after which HiGHS gives up on one mesh whatever its nodes: a guard against a program
#: whose root LP alone runs away, far above any bench model's (at most 10 s of CPU)
TIME_LIMIT: Final = 600.0
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
    #: the MILP's size: variables and constraint rows (the budget's row included)
    variables: int = 0
    constraints: int = 0


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

    def add(self, v: int, time: float, mem: float) -> None:
        """Charge variable ``v`` more time and memory (an edge folded onto one end)."""
        self.cost[v] += time
        self.mem[v] += mem
        if math.isinf(time):
            self.upper[v] = 0.0

    def vars(self, time: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """Continuous variables in ``[0, 1]`` (``[0, 0]`` where the time is infinite)."""
        n = len(self.cost)
        self.cost += time.tolist()
        self.mem += mem.tolist()
        self.integral += [0] * len(time)
        self.upper += np.where(np.isinf(time), 0.0, 1.0).tolist()
        return np.arange(n, n + len(time))

    def rows_reserved(self, n: int, lo: float, hi: float) -> int:
        """``n`` rows with bounds ``[lo, hi]``, their entries given by ``entries``."""
        r = len(self.lo)
        self.lo += [lo] * n
        self.hi += [hi] * n
        return r

    def entries(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        self.rows += rows.tolist()
        self.cols += cols.tolist()
        self.vals += vals.tolist()

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


class Pruned(Exception):
    """The mesh's lower bound (each op's cheapest candidate, no reshard) is no better than a
    plan already found, so its MILP is not built."""

    def __init__(self, bound: float) -> None:
        super().__init__(bound)
        self.bound = bound


class Unsolved(Exception):
    """HiGHS found no assignment on this mesh within ``NODE_LIMIT`` nodes or ``TIME_LIMIT``
    seconds (none is known to fit or
    not: the search goes on with the other meshes)."""

    def __init__(self, mesh: ProcessMesh) -> None:
        super().__init__(mesh)
        self.mesh = mesh


#: a folded edge: (producer node or -1 for a source, result slot or source tensor, consumer
#: node, operand slot)
Edge = tuple[int, int, int, int]


@dataclass(slots=True)
class _Program:
    """The MILP of one mesh as it is built: the model, each node's candidates and variables,
    and where each source tensor's layout is decided (its own variables, or, for a source one
    op slot reads, that slot of the consumer's strategy)."""

    g: Graph
    mesh: ProcessMesh
    q: Quotient
    opts: cm.Options
    m: _Model
    cands: dict[int, tuple[Strategy, ...]]
    xs: dict[int, list[int]]
    layouts: dict[int, list[DistAttr]]
    src_x: dict[int, list[int]]
    fed: dict[int, tuple[int, int]]


def solve(g: Graph, mesh: ProcessMesh, budget: float, opts: cm.Options,
          objective: Objective = "time", quotient: Quotient | None = None,
          cutoff: float = math.inf) -> Choice:
    """The best assignment of ``g``'s ops on ``mesh`` within ``budget`` bytes per rank.
    ``cutoff``: a step time already reached; a mesh that cannot beat it raises ``Pruned``."""
    q = quotient or fold(g)
    pr = _Program(g, mesh, q, opts, _Model([], [], [], [], [], [], [], [], []), {}, {}, {}, {},
                  {})
    _op_nodes(pr)
    if objective == "time":
        bound = sum(min(pr.m.cost[v] for v in vs) for vs in pr.xs.values())
        if bound >= cutoff:
            raise Pruned(bound)
    edges = _folded_edges(g, q)
    _source_nodes(pr, edges)
    for (p, slot, c, j), w in edges.items():
        if p < 0 and slot in pr.fed:
            continue  # fed as its one consumer reads it: no reshard, no variable
        t = g.ops[c].inputs[j]
        if p < 0:
            made = {a: [v] for a, v in zip(pr.layouts[slot], pr.src_x[slot], strict=True)}
        else:
            made = _group([s.outputs[slot] for s in pr.cands[p]], pr.xs[p])
        need = _group([s.inputs[j] for s in pr.cands[c]], pr.xs[c])
        _transport(pr.m, t, made, need, w, opts, _follows(g.ops[c], j, pr.cands[c]))
    return _run(pr, budget, objective)


def _op_nodes(pr: _Program) -> None:
    """A binary per representative op and candidate: its compute and gradient all-reduces,
    its results' bytes, times the ops it stands for; exactly one per op."""
    m, q = pr.m, pr.q
    for k, op in enumerate(pr.g.ops):
        if q.rep[k] != k:
            continue
        w = q.weight[k]
        pr.cands[k] = cs = strategies(op, pr.mesh, _pending(pr, op))
        pr.xs[k] = [m.var(w * (cm.compute_time(op, s.split, pr.opts)
                               + cm.gradient_sync_time(op, s.inputs, s.work_dims, pr.opts)
                               + cm.halo_time(op, s.inputs, s.outputs, pr.opts)),
                          w * sum(local_bytes(a, t.shape, t.dtype)
                                  for a, t in zip(s.outputs, op.outputs, strict=True)), True)
                    for s in cs]
        m.row([(v, 1.0) for v in pr.xs[k]], 1.0, 1.0)


def _pending(pr: _Program, op: Op) -> Pending:
    """Per operand, the pending sums its producer's candidates may make and hand on: a masked
    one (a lookup's in a table split on its rows, which no reshard makes) and any that the
    producer took as it is (its chain); a contraction's plain sum is reduced on its edge, as
    late costs what early does. A representative's producer comes before it, so its
    candidates are known."""
    out = []
    for t in op.inputs:
        pieces: set[DistAttr] = set()
        if t.producer is not None:
            for s in pr.cands[pr.q.rep[t.producer.order]]:
                carried = any(a.partial_items for a in s.inputs)
                pieces |= {p for p in pending_pieces(s.outputs[t.index])
                           if carried or p.mask_items}
        out.append(frozenset(pieces))
    return tuple(out) if any(out) else ()


def _folded_edges(g: Graph, q: Quotient) -> dict[Edge, int]:
    """Each tensor edge of the folded graph and how many edges of ``g`` it stands for."""
    edges: dict[Edge, int] = defaultdict(int)
    for k, op in enumerate(g.ops):
        for j, t in enumerate(op.inputs):
            if t.producer is None:
                edges[(-1, q.rep_tensor[t.order], q.rep[k], j)] += 1
            else:
                edges[(q.rep[t.producer.order], t.index, q.rep[k], j)] += 1
    return edges


def _source_nodes(pr: _Program, edges: dict[Edge, int]) -> None:
    """The source tensors' layouts. A source one op slot reads is fed in the layout that
    slot's strategy reads (any other would cost a reshard more and its buffer), so its bytes
    are charged to the consumer's variables; any other source is replicated or a layout one
    of its consumers' candidates reads, with a variable each."""
    readers: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for p, i, c, j in edges:
        if p < 0:
            readers[i].append((c, j))
    for i, rs in readers.items():
        t, w = pr.g.tensors[i], pr.q.tensor_weight[i]
        if len(rs) == 1:
            c, j = pr.fed[i] = rs[0]
            for s, v in zip(pr.cands[c], pr.xs[c], strict=True):
                pr.m.add(v, 0.0, w * _source_bytes(s.inputs[j], t, pr.opts))
            continue
        ls = [DistAttr.replicated(pr.mesh, t.ndim)]
        for c, j in rs:
            ls += [s.inputs[j] for s in pr.cands[c]]
        pr.layouts[i] = ls = list(dict.fromkeys(ls))
        pr.src_x[i] = [pr.m.var(0.0, w * _source_bytes(a, t, pr.opts), True) for a in ls]
        pr.m.row([(v, 1.0) for v in pr.src_x[i]], 1.0, 1.0)


def _follows(op: Op, j: int, cands: Sequence[Strategy]) -> bool:
    """Whether ``op`` follows its producer on operand ``j`` (Alpa's contraction of a chain of
    elementwise and reshaping ops): its other operands are sources and its layout is settled
    by operand ``j``'s, so a layout of ``j`` that it takes as is is never resharded first."""
    return len({s.inputs[j] for s in cands}) == len(cands)


def _source_bytes(a: DistAttr, t: Tensor, opts: cm.Options) -> int:
    """A source's bytes per rank: a parameter's with its gradient and optimizer state."""
    return cm.param_bytes(a, t, opts) if t.role == "param" else local_bytes(a, t.shape, t.dtype)


def _group(attrs: Sequence[DistAttr], xs: Sequence[int]) -> dict[DistAttr, list[int]]:
    out: dict[DistAttr, list[int]] = defaultdict(list)
    for a, v in zip(attrs, xs, strict=True):
        out[a].append(v)
    return out


@functools.lru_cache(maxsize=MEMO_SIZE)
def _edge_prices(_shape: tuple[int, ...], _dtype: str, _opts: cm.Options
                 ) -> dict[tuple[DistAttr, DistAttr], tuple[float, int]]:
    """The memo of one tensor kind's edge prices (bounded: a process planning many models
    keeps the most recent kinds)."""
    return {}


def _kind_prices(t: Tensor, opts: cm.Options
                 ) -> Callable[[DistAttr, DistAttr], tuple[float, int]]:
    memo = _edge_prices(t.shape, t.dtype, opts)

    def price(a: DistAttr, r: DistAttr) -> tuple[float, int]:
        hit = memo.get((a, r))
        if hit is None:
            hit = memo[(a, r)] = (cm.edge_time(a, r, t, opts),
                                  0 if a == r else local_bytes(r, t.shape, t.dtype))
        return hit
    return price


def _targets(made: Sequence[DistAttr], need: Sequence[DistAttr], follow: bool) -> np.ndarray:
    """Which layouts a reshard from each of ``made`` may reach on one edge (a boolean matrix,
    ``made`` by ``need``). A follower's layout that it reads as is goes nowhere else. Otherwise a
    reshard changes what one mesh dim does (gathers, splits or moves one split: one
    collective), and a pending sum is only reduced (an all-reduce, or a reduce-scatter onto its
    mesh dim); a plan that changes several mesh dims does it over several edges. Where the
    consumer reads no such layout, every one it reads."""
    ra = np.array([_roles(a) for a in made])
    rr = np.array([_roles(r) for r in need])
    pending = np.array([[m in a.partial_dims for m in range(a.mesh.ndim)] for a in made])
    changed = ((ra[:, None, :] != rr[None, :, :]) & ~pending[:, None, :]).sum(axis=2)
    near: np.ndarray = changed <= np.where(pending.any(axis=1), 0, 1)[:, None]
    near[~near.any(axis=1)] = True
    if follow:
        where = {r: j for j, r in enumerate(need)}
        for i, a in enumerate(made):
            if a in where:
                near[i] = False
                near[i, where[a]] = True
    return near


@functools.lru_cache(maxsize=MEMO_SIZE)
def _roles(a: DistAttr) -> tuple[int, ...]:
    """What each mesh dim does in ``a``, as a code: 0 nothing (replicated or a pending sum), or
    ``1 + n d + k`` for splitting tensor dim ``d`` at position ``k`` of its mesh dims (``k`` is
    below the mesh's ``n`` dims, so no two roles share a code on any mesh)."""
    n = a.mesh.ndim
    out = [0] * n
    for d, ms in enumerate(a.multi_dims_mapping):
        for k, m in enumerate(ms):
            out[m] = 1 + n * d + k
    return tuple(out)


def _transport(m: _Model, t: Tensor, made: dict[DistAttr, list[int]],
               need: dict[DistAttr, list[int]], w: int, opts: cm.Options,
               follow: bool) -> None:
    """The reshard of one edge. Where one end has a single layout the other end's variables
    carry the edge's price; else a transport ``y[a, r]`` whose rows sum to the producer's
    choice of ``a`` and columns to the consumer's of ``r`` (a follower's ``a`` that it reads
    as is has the one pair ``(a, a)``), added as arrays."""
    price = _kind_prices(t, opts)
    if len(made) == 1 or len(need) == 1:
        fixed, free, fixed_is_made = ((next(iter(made)), need, True) if len(made) == 1
                                      else (next(iter(need)), made, False))
        for b, vs in free.items():
            time, buf = price(fixed, b) if fixed_is_made else price(b, fixed)
            for v in vs:
                m.add(v, w * time, w * buf)
        return
    ma, nr = list(made), list(need)
    ia, ir = np.nonzero(_targets(ma, nr, follow))
    tb = np.array([price(ma[i], nr[j]) for i, j in zip(ia.tolist(), ir.tolist(), strict=True)],
                  dtype=float).reshape(-1, 2)
    ys = m.vars(w * tb[:, 0], w * tb[:, 1])
    r0 = m.rows_reserved(len(ma) + len(nr), 0.0, 0.0)
    xa = [(i, v) for i, vs in enumerate(made.values()) for v in vs]
    xr = [(len(ma) + j, v) for j, vs in enumerate(need.values()) for v in vs]
    rows = np.concatenate([ia, len(ma) + ir, [i for i, _ in xa + xr]]) + r0
    cols = np.concatenate([ys, ys, [v for _, v in xa + xr]])
    vals = np.concatenate([np.ones(2 * len(ys)), -np.ones(len(xa) + len(xr))])
    m.entries(rows, cols, vals)


def _run(pr: _Program, budget: float, objective: Objective) -> Choice:
    m = pr.m
    n = len(m.cost)
    time = np.array([0.0 if math.isinf(c) else c for c in m.cost])
    mem = np.array(m.mem)
    a = coo_array((m.vals, (m.rows, m.cols)), shape=(len(m.lo), n)).tocsr()
    cons = [LinearConstraint(a, np.array(m.lo), np.array(m.hi))]
    if math.isfinite(budget):
        cons.append(LinearConstraint(mem.reshape(1, -1), -np.inf, budget))
    c = time if objective == "time" else mem + 1e-9 * time
    # no presolve: the transports' LP is close to integral and HiGHS's presolve of it took
    # longer than the solve itself (LLaMA, 2x4: 4.4 s against 0.5 s without; same optimum)
    res = milp(c, integrality=np.array(m.integral), bounds=Bounds(0, np.array(m.upper)),
               constraints=cons, options={"node_limit": NODE_LIMIT, "time_limit": TIME_LIMIT,
                                          "mip_rel_gap": MIP_GAP,
                                          "presolve": False})
    if res.x is None:
        if res.status == 1:  # a limit (nodes or seconds), before HiGHS found any assignment
            raise Unsolved(pr.mesh)
        raise Infeasible(_floor(m, pr.xs, pr.src_x))
    x = res.x
    pick = {k: pr.cands[k][int(np.argmax([x[v] for v in vs]))] for k, vs in pr.xs.items()}
    ops = tuple(pick[pr.q.rep[k]] for k in range(len(pr.g.ops)))
    sources: dict[str, DistAttr] = {}
    for t in pr.g.tensors:
        if t.producer is None and t.consumers:
            r = pr.q.rep_tensor[t.order]
            if r in pr.src_x:
                sources[t.name] = pr.layouts[r][int(np.argmax([x[v] for v in pr.src_x[r]]))]
            elif r in pr.fed:
                reader, slot = pr.fed[r]
                sources[t.name] = pick[reader].inputs[slot]
    return Choice(pr.mesh, ops, sources, float(time @ x), float(mem @ x), n,
                  sum(k.A.shape[0] for k in cons))


def _floor(m: _Model, xs: dict[int, list[int]], src_x: dict[int, list[int]]) -> float:
    """A lower bound of any assignment's memory: each node's smallest option."""
    return sum(min(m.mem[v] for v in vs) for vs in (*xs.values(), *src_x.values()))
