"""Seeded random DAGs of mixed ops with careless annotations, for completion's property tests and
``bench/random_dag.py``.

Each op takes operands among the recent tensors (so the graph is a DAG with fan-in and fan-out,
not a chain): elementwise binaries with broadcasting, unaries, matmul, reductions with keepdim,
transpose, reshape, softmax, concat, split, slice, embedding and layer_norm, all float64 on dims
of 2, 3, 4 and 6 (so some splits are uneven). A random subset of tensors is annotated on a 2-D or
3-D mesh: some dims sharded, some open, some partial, some with a priority.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import spmdrules as sr
from spmdrules import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

MESHES = (
    sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"]),
    sr.ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["a", "b"]),
    sr.ProcessMesh.from_shape([2, 2, 2], dim_names=["a", "b", "c"]),
)
SIZES = (2, 3, 4, 6)
VOCAB = 6
WINDOW = 24  # operands come from the last WINDOW tensors


def _one(x: Any) -> Tensor:
    return x[0] if isinstance(x, tuple) else x  # type: ignore[no-any-return]


class _Builder:
    def __init__(self, g: Graph, rng: random.Random) -> None:
        self.g, self.rng = g, rng
        self.pool: list[Tensor] = []
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def param(self, shape: list[int]) -> Tensor:
        t = self.g.param(self.name("w"), shape, "float64")
        self.pool.append(t)
        return t

    def pick(self, ok: Callable[[Tensor], bool] = lambda t: True) -> Tensor | None:
        recent = [t for t in self.pool[-WINDOW:] if ok(t)]
        return self.rng.choice(recent) if recent else None

    def any(self) -> Tensor:
        t = self.pick(lambda t: t.dtype == "float64" and 1 <= t.ndim <= 4)
        if t is None:
            t = self.param([self.rng.choice(SIZES) for _ in range(self.rng.randint(2, 3))])
        return t

    def add(self, t: Any) -> None:
        for x in t if isinstance(t, tuple) else (t,):
            if isinstance(x, Tensor):
                self.pool.append(x)

    # ---- one op --------------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.rng
        kind = rng.choices(
            ["binary", "unary", "matmul", "reduce", "transpose", "reshape", "softmax", "concat",
             "split", "slice", "embedding", "layer_norm"],
            [6, 4, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1])[0]
        x = self.any()
        sh = list(x.shape)
        nm = self.name(kind)
        if kind == "binary":
            f = rng.choice([ops.add, ops.multiply, ops.subtract])
            same = self.pick(lambda t: list(t.shape) == sh and t is not x)
            if same is not None and rng.random() < 0.7:
                y = same
            else:  # broadcast: a trailing part of x's shape, some dims 1
                k = rng.randint(1, len(sh))
                y = self.param([d if rng.random() < 0.8 else 1 for d in sh[-k:]])
            a, b = (x, y) if rng.random() < 0.5 else (y, x)
            self.add(f(a, b, name=nm))
        elif kind == "unary":
            f = rng.choice([ops.tanh, ops.gelu, ops.relu])
            self.add(f(x, name=nm) if f is not ops.scale else f(x, scale=0.5, name=nm))
        elif kind == "matmul":
            k = sh[-1]
            w = self.pick(lambda t: t.ndim == 2 and t.shape[0] == k and t is not x)
            if w is None or rng.random() < 0.3:
                w = self.param([k, rng.choice(SIZES)])
            self.add(ops.matmul(x, w, name=nm))
        elif kind == "reduce":
            f = rng.choice([ops.sum, ops.mean, ops.max])
            axis = rng.randrange(len(sh))
            keep = {"keepdim" if f is ops.mean else "keep_dim": True}
            self.add(f(x, axis=[axis], name=nm, **keep))
        elif kind == "transpose":
            perm = list(range(len(sh)))
            rng.shuffle(perm)
            self.add(ops.transpose(x, perm=perm, name=nm))
        elif kind == "reshape":
            if len(sh) >= 2 and rng.random() < 0.5:  # merge the last two dims
                new = [*sh[:-2], sh[-2] * sh[-1]]
            else:  # split a dim of 4 or 6 in two
                cands = [i for i, d in enumerate(sh) if d in (4, 6)]
                if not cands or len(sh) >= 4:
                    new = [*sh[:-2], sh[-2] * sh[-1]] if len(sh) >= 2 else sh
                else:
                    i = rng.choice(cands)
                    new = [*sh[:i], 2, sh[i] // 2, *sh[i + 1:]]
            self.add(ops.reshape(x, shape=new, name=nm))
        elif kind == "softmax":
            self.add(ops.softmax(x, axis=rng.randrange(-len(sh), 0), name=nm))
        elif kind == "concat":
            axis = rng.randrange(len(sh))
            y = self.pick(lambda t: t.ndim == len(sh) and t.dtype == "float64" and all(
                t.shape[i] == sh[i] for i in range(len(sh)) if i != axis))
            assert y is not None  # x itself qualifies
            self.add(ops.concat([x, y], axis=axis, name=nm))
        elif kind == "split":
            cands = [i for i, d in enumerate(sh) if d % 2 == 0]
            if not cands:
                self.add(ops.tanh(x, name=nm))
                return
            self.add(ops.split_with_num(x, num=2, axis=rng.choice(cands), name=nm))
        elif kind == "slice":
            i = rng.randrange(len(sh))
            if sh[i] < 2:
                self.add(ops.tanh(x, name=nm))
                return
            self.add(ops.slice(x, axes=[i], starts=[1], ends=[sh[i]], name=nm))
        elif kind == "embedding":
            ids = self.g.input(self.name("ids"), [rng.choice(SIZES) for _ in range(2)], "int64")
            table = self.param([VOCAB, rng.choice(SIZES)])
            self.add(ops.embedding(ids, table, name=nm))
        elif kind == "layer_norm":
            n = len(sh)
            axis = rng.randrange(1, n) if n > 1 else 0
            if axis == 0:
                self.add(ops.tanh(x, name=nm))
                return
            size = 1
            for d in sh[axis:]:
                size *= d
            s = self.param([size])
            b = self.param([size])
            self.add(_one(ops.layer_norm(x, s, b, begin_norm_axis=axis, name=nm)))


def _annotate(g: Graph, rng: random.Random, mesh: sr.ProcessMesh, fraction: float,
              even: bool) -> None:
    names = mesh.dim_names
    size = dict(zip(names, mesh.shape, strict=True))
    for t in g.tensors:
        if t.dtype != "float64" or rng.random() >= fraction:
            continue
        free = list(names)
        rng.shuffle(free)
        spec: list[Any] = []
        for d in t.shape:
            r = rng.random()
            if r < 0.35 and free and d > 1 and not (even and d % size[free[-1]]):
                spec.append(free.pop())
            elif r < 0.55:
                spec.append(OPEN)
            else:
                spec.append(None)
        partial = None
        if free and t.producer is not None and rng.random() < 0.15:
            partial = {free.pop(): rng.choice(["sum", "max"])}
        priority = rng.choice([0, 0, 0, 1, 2])
        shard(t, mesh, tuple(spec), partial=partial, priority=priority)


def random_dag(seed: int, n_ops: int, *, fraction: float = 0.1, mesh: int | None = None,
               even: bool = False) -> Graph:
    """A random DAG of ``n_ops`` mixed float64 ops, ``fraction`` of its tensors annotated on one
    of ``MESHES`` (chosen by the seed unless ``mesh`` is given). ``even``: annotations split only
    dims the mesh divides (else some ask for uneven splits no reshard plan reaches)."""
    rng = random.Random(seed)
    m = MESHES[rng.randrange(len(MESHES)) if mesh is None else mesh]
    with Graph(f"random_dag_{seed}_{n_ops}") as g:
        b = _Builder(g, rng)
        x = g.input("x", [rng.choice(SIZES) for _ in range(3)], "float64")
        b.pool.append(x)
        for _ in range(n_ops):  # one op per step
            b.step()
    _annotate(g, rng, m, fraction, even)
    if not g.annotations():
        shard(x, m, (OPEN,) * x.ndim)
    return g
