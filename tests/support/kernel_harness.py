"""The harnesses of the local kernels' tests (tests/execution/kernels/test_<family>.py).

Every kernel is proven by execution, twice: on a one-rank mesh (whole arrays) against an independent
serial reference, and on sharded layouts inferred by the op's own rule: scatter the global inputs by
the rule's input attributes, run the kernel at every mesh coordinate, gather by the rule's output
attributes (replicas must agree, partials are reduced by their type) and compare with the serial
answer.

Two harnesses, one per style of test: ``execute``/``serial`` run an op on given input attributes
(the compute ops' tests: elementwise, matmul, einsum_op, reduction); ``Op`` with
``check_serial``/``check_sharded`` draws random forward and reverse attributes on every test mesh
(the shape, join/split and nn ops' tests). Inputs are drawn from one seeded generator, ``RNG``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import coords, gather, scatter
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import TensorParam
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    get_kernel,
)
from spmdrules.graph import shapes

Value = Array | list[Array] | None
MESH1 = sr.ProcessMesh([0])
RNG = np.random.default_rng(20240601)


def mesh(*shape: int) -> sr.ProcessMesh:
    return sr.ProcessMesh.from_shape(list(shape))


def rep(m: sr.ProcessMesh, ndim: int) -> DistAttr:
    return DistAttr.replicated(m, ndim)


def layout(m: sr.ProcessMesh, mapping: Sequence[Any]) -> DistAttr:
    """An attribute from a mapping whose entries are a mesh dim, -1, or a list (a co-shard)."""
    return DistAttr(
        m,
        multi_dims_mapping=[d if isinstance(d, list) else [] if d == -1 else [d] for d in mapping],
    )


# ---- the harness: rule -> scatter -> kernel per coordinate -> gather ----------------------------
def _shape(v: Value) -> Any:
    if v is None:
        return None
    if isinstance(v, list):
        return tuple(e.shape for e in v)
    return v.shape


def execute(
    op: str,
    values: Sequence[Value],
    in_attrs: Sequence[Any],
    attrs: dict[str, Any],
    out_shapes: Sequence[Any],
) -> list[Any]:
    """Run ``op`` on ``values`` laid out as its rule infers from ``in_attrs``; the global outputs."""
    rule = sr.get_rule(op)
    specs: list[Any] = []
    for v, a in zip(values, in_attrs, strict=True):
        if v is None:
            specs.append(None)
        elif isinstance(v, list):
            specs.append([TensorSpec(e.shape, ea) for e, ea in zip(v, a, strict=True)])
        else:
            specs.append(TensorSpec(v.shape, a))
    names = {p.name for p in rule.attrs}
    info = rule.infer_forward(*specs, **{k: v for k, v in attrs.items() if k in names})
    full = {p.name: p.default for p in rule.attrs} | attrs
    rng = np.random.default_rng(5)
    in_slots: list[Any] = list(info.inputs)
    out_slots: list[Any] = list(info.outputs)
    scattered: list[Any] = []
    for v, ia in zip(values, in_slots, strict=True):
        if v is None:
            scattered.append(None)
        elif isinstance(v, list):
            scattered.append([scatter(e, a, rng) for e, a in zip(v, ia, strict=True)])
        else:
            scattered.append(scatter(v, ia, rng))
    kernel = get_kernel(op)
    first = next(a for a in in_slots if a is not None)
    m = (first[0] if isinstance(first, tuple) else first).mesh
    results: dict[tuple[int, ...], tuple[Any, ...]] = {}
    for c in coords(DistAttr.replicated(m, 0)):
        blocks = [
            None if s is None else [e[c] for e in s] if isinstance(s, list) else s[c]
            for s in scattered
        ]
        ctx = LocalContext(
            op=op,
            mesh=m,
            coord=c,
            input_shapes=tuple(_shape(v) for v in values),
            input_attrs=tuple(info.inputs),
            output_shapes=tuple(out_shapes),
            output_attrs=tuple(info.outputs),
            attrs=full,
        )
        results[c] = kernel(ctx, blocks)
    outs: list[Any] = []
    for i, (shape, oa) in enumerate(zip(out_shapes, out_slots, strict=True)):
        if isinstance(oa, tuple):
            outs.append(
                [
                    gather({c: r[i][j] for c, r in results.items()}, shape[j], a)
                    for j, a in enumerate(oa)
                ]
            )
        else:
            outs.append(gather({c: r[i] for c, r in results.items()}, shape, oa))
    return outs


def serial(
    op: str, values: Sequence[Value], attrs: dict[str, Any], out_shapes: Sequence[Any]
) -> list[Any]:
    """The kernel on a one-rank mesh: the whole arrays."""
    in_attrs = [
        None
        if v is None
        else [rep(MESH1, e.ndim) for e in v]
        if isinstance(v, list)
        else rep(MESH1, v.ndim)
        for v in values
    ]
    return execute(op, values, in_attrs, attrs, out_shapes)


def close(got: Any, want: Any, tol: float = 1e-12) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ---- inputs ----------------------------------------------------------------------------------------
def _normal(*shape: int) -> Array:
    return RNG.standard_normal(shape) * 2.0


def _open_unit(*shape: int) -> Array:
    return RNG.uniform(-0.99, 0.99, shape)


def _positive(*shape: int) -> Array:
    return 0.1 + np.abs(RNG.standard_normal(shape)) * 3.0


def _prob(*shape: int) -> Array:
    return RNG.uniform(0.0, 1.0, shape)


def _x(*shape: int) -> Array:
    return RNG.standard_normal(shape)


# the compute reductions (test_reduction.py runs them; test_elementwise.py checks they have kernels)
REDUCTIONS = [
    "sum",
    "reduce_sum",
    "squared_l2_norm",
    "max",
    "amax",
    "reduce_max",
    "min",
    "amin",
    "prod",
    "all",
    "any",
    "frobenius_norm",
    "logsumexp",
]


Arg = Array | list[Array] | None
Reference = Callable[..., tuple[Any, ...]]
MESHES = [(1,), (4,), (3,), (2, 2), (2, 3), (2, 2, 2)]
REDUCE = ("sum", "avg", "max", "min")


# ---- the harness: the rule's attributes, the kernel per coordinate, the gather ------------------------
def mesh_of(shape: Sequence[int]) -> ProcessMesh:
    n = int(np.prod(shape))
    return ProcessMesh(np.arange(n).reshape(shape).tolist())


def per_param(slots: Sequence[Any], params: Sequence[TensorParam]) -> tuple[Any, ...]:
    """A rule's answer for one side, one entry per param (a tuple for a list param): a side of
    one list param may be answered flat, one attribute per tensor (split's outs)."""
    if len(params) == 1 and params[0].kind == "list" and not (
        len(slots) == 1 and isinstance(slots[0], tuple)
    ):
        return (tuple(slots),)
    return tuple(slots)


def _meta(x: Arg) -> Any:
    if x is None:
        return None
    if isinstance(x, list):
        return tuple(shapes.TensorMeta(a.shape, str(a.dtype)) for a in x)
    return shapes.TensorMeta(x.shape, str(x.dtype))


def _shape_of(x: Arg) -> Any:
    if x is None:
        return None
    return tuple(a.shape for a in x) if isinstance(x, list) else x.shape


def _spec(x: Arg, a: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, list):
        return [TensorSpec(t.shape, at) for t, at in zip(x, a, strict=True)]
    return TensorSpec(x.shape, a)


def _scatter(x: Arg, a: Any, rng: np.random.Generator) -> Any:
    if x is None:
        return None
    if isinstance(x, list):
        return [scatter(t, at, rng) for t, at in zip(x, a, strict=True)]
    return scatter(x, a, rng)


def _at(s: Any, c: tuple[int, ...]) -> LocalValue:
    if s is None:
        return None
    return [d[c] for d in s] if isinstance(s, list) else s[c]


@dataclass
class Op:
    """One op on fixed global inputs: its rule, kernel, output shapes and reference result."""

    name: str
    args: list[Arg]
    attrs: dict[str, Any] = field(default_factory=dict)
    #: generic rules: the declared result shapes (``outs``)
    outs: list[tuple[int, ...]] | None = None

    def __post_init__(self) -> None:
        self.rule = sr.get_rule(self.name)
        self.full_attrs = {a.name: self.attrs.get(a.name, a.default) for a in self.rule.attrs}
        if self.outs is None:
            self.out_shapes: tuple[Any, ...] = shapes.infer(
                self.name, [_meta(a) for a in self.args], self.full_attrs
            )
        else:
            self.out_shapes = (tuple(self.outs),)

    @property
    def generic(self) -> bool:
        return self.outs is not None

    def infer(self, in_attrs: list[Any], out_attrs: list[Any] | None) -> SpmdInfo:
        """Forward from ``in_attrs``, or reverse when ``out_attrs`` are given."""
        specs = [_spec(x, a) for x, a in zip(self.args, in_attrs, strict=True)]
        if self.generic:  # both lists are arguments in both directions
            reverse = out_attrs is not None
            mesh = _flat(in_attrs)[0].mesh
            given = out_attrs or [[DistAttr(mesh, [-1] * len(s)) for s in self.out_shapes[0]]]
            outs = [TensorSpec(s, a) for s, a in zip(self.out_shapes[0], given[0], strict=True)]
            fn = self.rule.infer_reverse if reverse else self.rule.infer_forward
            return fn(*specs, outs)
        if out_attrs is None:
            return self.rule.infer_forward(*specs, **self.attrs)
        results: list[Any] = [
            [TensorSpec(s, a) for s, a in zip(shp, at, strict=True)] if isinstance(shp, list)
            else TensorSpec(shp, at)
            for shp, at in zip(self.out_shapes, out_attrs, strict=True)
        ]
        return self.rule.infer_reverse(*specs, *results, **self.attrs)

    def attributes(self, info: SpmdInfo) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        if self.generic:
            return (tuple(info.inputs),), (tuple(info.outputs),)
        return per_param(info.inputs, self.rule.inputs), per_param(info.outputs, self.rule.outputs)

    def run(
        self,
        in_attrs: Sequence[Any],
        out_attrs: Sequence[Any],
        rng: np.random.Generator,
        kernel: Callable[[LocalContext, Sequence[LocalValue]], tuple[LocalValue, ...]] | None = None,
    ) -> list[Any]:
        """Scatter by ``in_attrs``, run the kernel per coordinate, gather by ``out_attrs``."""
        kernel = kernel or get_kernel(self.name)
        mesh = next(a for a in _flat(in_attrs) if a is not None).mesh
        scattered = [_scatter(x, a, rng) for x, a in zip(self.args, in_attrs, strict=True)]
        args = self.args[:1] if self.generic else self.args
        blocks = {}
        for c in np.ndindex(*mesh.shape):
            ctx = LocalContext(
                self.name, mesh, tuple(c), tuple(_shape_of(x) for x in args),
                tuple(in_attrs[: len(args)]), self.out_shapes, tuple(out_attrs), self.full_attrs,
            )
            blocks[tuple(c)] = kernel(ctx, [_at(s, tuple(c)) for s in scattered[: len(args)]])
        return self.gather(blocks, out_attrs)

    def gather(self, blocks: dict[tuple[int, ...], Any], out_attrs: Sequence[Any]) -> list[Any]:
        got: list[Any] = []
        for k, (shp, at) in enumerate(zip(self.out_shapes, out_attrs, strict=True)):
            if isinstance(shp, list | tuple) and shp and isinstance(shp[0], tuple):
                got.append([
                    gather({c: b[k][i] for c, b in blocks.items()}, s, a)
                    for i, (s, a) in enumerate(zip(shp, at, strict=True))
                ])
            else:
                got.append(gather({c: b[k] for c, b in blocks.items()}, shp, at))
        return got


def _flat(xs: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        out.extend(x) if isinstance(x, list | tuple) else out.append(x)
    return out


def assert_same(got: Any, want: Any, exact: bool) -> None:
    if isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w, exact)
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    if exact:
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


# ---- random attributes -----------------------------------------------------------------------------
def random_attr(
    mesh: ProcessMesh, ndim: int, rng: np.random.Generator, partial: bool
) -> DistAttr:
    """Each mesh dim shards a random tensor dim (co-shards included), stays replicated, or (when
    ``partial``) holds a pending reduction of a random type."""
    mdm: list[list[int]] = [[] for _ in range(ndim)]
    part: dict[int, str] = {}
    for md in rng.permutation(mesh.ndim):
        r = rng.integers(0, ndim + 2)
        if r < ndim:
            mdm[int(r)].append(int(md))
        elif r == ndim + 1 and partial:
            part[int(md)] = str(rng.choice(REDUCE))
    return DistAttr(mesh, multi_dims_mapping=mdm, partial=part)


def _random_like(x: Arg, mesh: ProcessMesh, rng: np.random.Generator, partial: bool) -> Any:
    if x is None:
        return None
    if isinstance(x, list):
        shared = rng.random() < 0.5  # often all alike, so joins keep a shared partial
        first = random_attr(mesh, x[0].ndim, rng, partial)
        return [first if shared else random_attr(mesh, t.ndim, rng, partial) for t in x]
    return random_attr(mesh, x.ndim, rng, partial and x.dtype.kind == "f")


def _random_out(shp: Any, mesh: ProcessMesh, rng: np.random.Generator) -> Any:
    if isinstance(shp, list | tuple) and shp and isinstance(shp[0], tuple):
        return [random_attr(mesh, len(s), rng, False) for s in shp]
    return random_attr(mesh, len(shp), rng, False)


def check_sharded(op: Op, want: Sequence[Any], exact: bool, seed: int, draws: int = 8) -> int:
    """Random forward and reverse cases on every test mesh; the number that ran."""
    rng = np.random.default_rng(seed)
    ran = 0
    for ms in MESHES:
        mesh = mesh_of(ms)
        for k in range(draws):
            ins = [_random_like(x, mesh, rng, partial=k % 2 == 0) for x in op.args]
            outs = None
            if k % 2 and (op.rule.has_reverse or op.generic):
                outs = [_random_out(s, mesh, rng) for s in op.out_shapes]
            try:
                info = op.infer(ins, outs)
            except SpmdError:
                continue  # the rule refuses these attributes (a conflict, an unsupported shard)
            in_attrs, out_attrs = op.attributes(info)
            got = op.run(in_attrs, out_attrs, rng)
            assert_same(got, want, exact and not _has_partial(in_attrs))
            ran += 1
    return ran


def _has_partial(attrs: Sequence[Any]) -> bool:
    return any(a is not None and a.partial_items for a in _flat(attrs))


def check_serial(op: Op, want: Sequence[Any], exact: bool) -> None:
    mesh = mesh_of((1,))
    ins = [_random_like(x, mesh, np.random.default_rng(0), False) for x in op.args]
    info = op.infer(ins, [_random_out(s, mesh, np.random.default_rng(0)) for s in op.out_shapes]
                    if op.generic else None)
    in_attrs, out_attrs = op.attributes(info)
    assert_same(op.run(in_attrs, out_attrs, np.random.default_rng(0)), want, exact)


# a reference shared by softmax and cross_entropy
def _ref_log_softmax(x: Array, axis: int) -> Array:
    ex = np.exp(x)
    out: Array = np.log(ex / ex.sum(axis=axis, keepdims=True))
    return out
