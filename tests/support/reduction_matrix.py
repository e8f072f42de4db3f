"""Every reduce type on every dtype, through an all-reduce and a reduce-scatter on groups of 2
(both dims of a 2x2 mesh), 3 and 4 processes: one graph, so that one mpiexec job runs it all.

Each case is ``reduce_base`` over dim 0 of an input whose dim 0 is cut one row per process of
the group, so process ``i``'s piece of the pending reduction is row ``i``, chosen here: NaN in
the first, a middle or the last piece, infinities of both signs, 0 * inf for a product, and ties
between -0.0 and 0.0, whose sign numpy decides by the order of the operands. A consumer that
cannot take the pending reduction makes completion reduce it: an all-reduce to replicated
copies, or a reduce-scatter where the consumer is annotated sharded.

:func:`check` holds every process's copy of every reduced tensor against serial numpy (the
kernel on the whole input), bit for bit where the result is one of the pieces (max, min, any,
all) and where it is an integer; sums, averages and products of floats accumulate in another
order (and the half floats in float32), so they must match in where NaN and each infinity are,
and elsewhere to the dtype's precision.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import spmdrules as sr
from spmdrules import ops
from spmdrules.execution.program import Program
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH2 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
MESH4 = sr.ProcessMesh([0, 1, 2, 3], dim_names=["g"])
MESH3 = sr.ProcessMesh([0, 1, 2], dim_names=["g"])
#: (label, mesh, mesh dim whose groups reduce)
GROUPINGS = (("2x2a", MESH2, 0), ("2x2b", MESH2, 1), ("4", MESH4, 0), ("3", MESH3, 0))
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
#: reduce_base's reduce_type attribute (Paddle's ReduceType) of each reduce type
REDUCE_TYPES = {"sum": 0, "max": 1, "min": 2, "product": 3, "avg": 4, "any": 5, "all": 6}
#: columns of each piece (the planner reduce-scatters only blocks that divide evenly)
COLS = 12
RTOL = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}


@dataclass(frozen=True)
class Case:
    name: str
    mesh: sr.ProcessMesh
    mesh_dim: int
    dtype: str
    reduce_type: str
    kind: str  # "all_reduce" or "reduce_scatter"
    #: the one column of the pieces the case keeps (None: all), and whether it keeps it as a
    #: vector of 1 or as a scalar (the reduced tensor 0-d); MPI reduces a message that small
    #: by another algorithm
    column: int | None = None
    scalar: bool = False


def numpy_dtype(name: str) -> np.dtype[Any]:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def cases() -> Iterator[Case]:
    for label, mesh, m in GROUPINGS:
        for dtype in (*FLOATS, *INTS, "bool"):
            rts = ("any", "all") if dtype == "bool" else ("sum", "avg", "max", "min", "product")
            for rt in rts:
                for kind in ("all_reduce", "reduce_scatter"):
                    yield Case(f"{label}.{dtype}.{rt}.{kind}", mesh, m, dtype, rt, kind)
        for rt in ("sum", "avg", "max", "min", "product"):  # NaN first, inf last
            yield Case(f"{label}.float64.{rt}.0d", mesh, m, "float64", rt, "all_reduce", 8, True)
        for dtype in FLOATS:
            for rt in ("max", "min"):  # NaN in the first piece only
                yield Case(f"{label}.{dtype}.{rt}.1", mesh, m, dtype, rt, "all_reduce", 0)


def pieces(case: Case, n: int) -> np.ndarray[Any, Any]:
    """The ``n`` pieces (rows) of ``case``'s pending reduction."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    dt = numpy_dtype(case.dtype)
    if case.dtype == "bool":
        x = rng.integers(0, 2, size=(n, COLS)) > 0
        x[:, 0], x[:, 1] = True, False  # every piece alike
        return x
    if case.dtype in INTS:
        x = rng.integers(-4 if dt.kind == "i" else 0, 5, size=(n, COLS))
        if case.reduce_type in ("max", "min"):
            info = np.iinfo(dt)
            x[0, 0], x[-1, 1] = info.max, info.min
        return x.astype(dt)
    x = rng.uniform(-4, 4, size=(n, COLS))
    nan, inf = np.nan, np.inf
    x[0, 0] = nan            # NaN in the first piece
    x[n // 2, 1] = nan       # in a middle one
    x[-1, 2] = nan           # in the last
    x[0, 3], x[-1, 3] = inf, -inf
    x[:, 4] = 0.0
    x[0, 4] = inf            # 0 * inf in a product
    x[:, 5] = [(-0.0 if i % 2 else 0.0) for i in range(n)]   # ties of signed zeros
    x[:, 6] = [(0.0 if i % 2 else -0.0) for i in range(n)]
    x[:, 7] = -0.0
    x[-1, 8], x[0, 8] = inf, nan
    return x.astype(dt)


def build() -> tuple[Graph, dict[str, np.ndarray[Any, Any]], list[Case]]:
    """The graph of every case, its feeds, and the cases (the reduced tensor is ``case.name``)."""
    feeds: dict[str, np.ndarray[Any, Any]] = {}
    todo = list(cases())
    with Graph("reductions") as g:
        for c in todo:
            n = c.mesh.shape[c.mesh_dim]
            value = pieces(c, n)
            if c.column is not None:
                value = value[:, c.column] if c.scalar else value[:, c.column:c.column + 1]
            x = g.input(f"x:{c.name}", list(value.shape), c.dtype)
            feeds[x.name] = value
            y = ops.reduce_base(x, axis=[0], reduce_type=REDUCE_TYPES[c.reduce_type],
                                name=c.name)
            consumer = ops.logical_not if c.dtype == "bool" else ops.relu
            z = consumer(y, name=f"use:{c.name}")
            group = c.mesh.dim_names[c.mesh_dim]
            shard(x, c.mesh, (group,) if c.scalar else (group, None))
            if c.kind == "reduce_scatter":
                shard(z, c.mesh, (group,), priority=1)
    return g, feeds, todo


def reduced_buffers(program: Program, todo: list[Case]) -> dict[str, tuple[Case, str]]:
    """For each case, the buffer its collective writes: (case, buffer name), by case name."""
    by_name = {c.name: c for c in todo}
    out: dict[str, tuple[Case, str]] = {}
    for ep in program.edges:
        c = by_name.get(ep.edge.tensor)
        if c is not None:
            kinds = [s.kind for s in ep.plan.steps]
            assert kinds == [c.kind], f"{c.name}: planned {kinds}"
            out[c.name] = (c, ep.dst)
    assert set(out) == set(by_name), f"no reduction planned for {set(by_name) - set(out)}"
    return out


def same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Equal values with equal signs (-0.0 is not 0.0), NaN matching NaN: what numpy computes
    for a selection is one of the pieces, so nothing less counts."""
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b))
    x, y = a.astype(np.float64), b.astype(np.float64)  # exact for every float dtype here
    equal = (x == y) & (np.signbit(x) == np.signbit(y))
    return bool(np.all(equal | (np.isnan(x) & np.isnan(y))))


def differ(case: Case, got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> str | None:
    """Why one process's copy ``got`` is not serial numpy's ``want``, or None."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} instead of {want.dtype}{list(want.shape)}"
    exact = case.reduce_type in ("max", "min", "any", "all") or want.dtype.kind in "iub"
    if exact:
        return None if same(want, got) else f"{got} instead of {want}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    for what, mask in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        if not np.array_equal(mask(g), mask(w)):
            return f"{what} at {np.flatnonzero(mask(g))} instead of {np.flatnonzero(mask(w))}"
    fin = np.isfinite(w)
    if not np.allclose(g[fin], w[fin], rtol=RTOL[want.dtype.name], atol=RTOL[want.dtype.name]):
        return f"{got} instead of {want}"
    return None


def check(program: Program, todo: list[Case], serial: Mapping[str, np.ndarray[Any, Any]],
          blocks: Mapping[int, Mapping[str, np.ndarray[Any, Any]]]) -> list[str]:
    """Every failure, one line each: a process's copy unlike serial numpy or unlike the other
    copies of the same block. ``blocks``: each process's buffers, by process id."""
    failures = []
    for name, (case, buf) in reduced_buffers(program, todo).items():
        lay = program.buffers[buf]
        first: dict[tuple[Any, ...], tuple[int, np.ndarray[Any, Any]]] = {}
        for pid, coord in zip(lay.mesh.process_ids, np.ndindex(*lay.mesh.shape), strict=True):
            box = lay.box(coord)
            got = np.asarray(blocks[pid][buf])
            want = np.asarray(serial[name])[tuple(slice(lo, hi) for lo, hi in box)]
            why = differ(case, got, want)
            if why:
                failures.append(f"{name} on process {pid}: {why}")
            seen = first.setdefault(box, (pid, got))
            if seen[0] != pid and not same(seen[1], got):
                failures.append(f"{name}: process {pid}'s copy {got} differs from process "
                                f"{seen[0]}'s {seen[1]}")
    return failures
