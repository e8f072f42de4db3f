"""Local kernels of the shape, join/split and nn ops (spmdrules/kernels_{shape,join,nn}.py).

Two properties per op: on a 1-rank mesh the kernel is the serial op (checked against an independent
numpy reference), and for sharded attributes drawn at random and passed through the op's rule
(forward from random input attributes, reverse from random output attributes), scattering the
global inputs by the rule's input attributes, running the kernel at every mesh coordinate and
gathering by the rule's output attributes gives the serial result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError, UnsupportedError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import ShardMismatch, gather, scatter, shard_index
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import TensorParam
from spmdrules.execution.kernels.cross_entropy import AllReduce, cross_entropy
from spmdrules.execution.local import Array, KernelInputError, LocalContext, LocalValue, get_kernel
from spmdrules.graph import shapes

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


RNG = np.random.default_rng(1234)


def _x(*shape: int) -> Array:
    return RNG.standard_normal(shape)


# ---- shape ops ---------------------------------------------------------------------------------------
SHAPE_CASES: list[tuple[str, list[int], dict[str, Any]]] = [
    ("reshape", [4, 6], {"shape": [24]}),
    ("reshape", [4, 6], {"shape": [2, 2, 6]}),
    ("reshape2", [2, 3, 4], {"shape": [6, -1]}),
    ("reshape", [6, 4], {"shape": [0, 2, 2]}),
    ("reshape", [8, 3], {"shape": [4, 6]}),
    ("reshape", [5, 3], {"shape": [3, 5]}),
    ("reshape", [], {"shape": [1, 1]}),
    ("flatten", [2, 3, 4], {"start_axis": 1, "stop_axis": -1}),
    ("flatten", [4, 3, 2, 2], {"start_axis": 0, "stop_axis": 1}),
    ("flatten", [], {}),
    ("squeeze", [1, 4, 1, 3], {"axis": []}),
    ("squeeze", [1, 4, 1, 3], {"axis": [2, -4]}),
    ("squeeze", [5, 1, 3], {"axis": [0, 1]}),
    ("unsqueeze", [4, 3], {"axis": [0]}),
    ("unsqueeze", [4, 3], {"axis": [2, 1]}),
    ("unsqueeze2", [5, 3], {"axis": [-1, 0, 1]}),
    ("transpose", [2, 3, 4], {"perm": [2, 0, 1]}),
    ("transpose2", [5, 3, 4], {"perm": [1, -1, 0]}),
]


def _shape_reference(name: str, x: Array, attrs: dict[str, Any], out_shape: Any) -> tuple[Any, ...]:
    if name.startswith("transpose"):
        return (np.transpose(x, [p % x.ndim for p in attrs["perm"]]),)
    if name.startswith("unsqueeze"):
        y = x
        for a in attrs["axis"]:  # sequential insertion, as paddle.unsqueeze
            y = np.expand_dims(y, a if a >= 0 else a + y.ndim + 1)
        return (y,)
    return (x.reshape(out_shape),)


@pytest.mark.parametrize(("name", "shape", "attrs"), SHAPE_CASES, ids=lambda v: str(v))
def test_shape_ops(name: str, shape: list[int], attrs: dict[str, Any]) -> None:
    x = _x(*shape)
    op = Op(name, [x], attrs)
    want = _shape_reference(name, x, attrs, op.out_shapes[0])
    assert want[0].shape == op.out_shapes[0]
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=len(shape) + len(name)) > 0


def test_reshape_refuses_blocks_cut_differently() -> None:
    """An x and out attribute that cut the data differently is a ShardMismatch, not garbage."""
    mesh = mesh_of((2,))
    op = Op("reshape", [_x(3, 4)], {"shape": [12]})
    x_attr = DistAttr(mesh, [0, -1])  # rows 0..1 and 2: 8 and 4 elements
    with pytest.raises(ShardMismatch, match="same pieces"):
        op.run([x_attr], [DistAttr(mesh, [0])], np.random.default_rng(0))  # 6 and 6


def test_squeeze_reads_size_one_off_the_global_shape() -> None:
    """A dim of global size 3 cut 4 ways has blocks of size 1 (and 0): they stay dims."""
    mesh = mesh_of((4,))
    x = _x(3, 1, 2)
    op = Op("squeeze", [x], {"axis": []})
    got = op.run([DistAttr(mesh, [0, -1, -1])], [DistAttr(mesh, [0, -1])], np.random.default_rng(0))
    assert_same(got, [x.reshape(3, 2)], exact=True)


# ---- join / split --------------------------------------------------------------------------------------
def test_concat() -> None:
    xs = [_x(2, 3), _x(4, 3), _x(1, 3)]
    op = Op("concat", [xs], {"axis": 0})
    want = (np.concatenate(xs, axis=0),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=1) > 0
    ys = [_x(3, 2), _x(3, 5)]
    op = Op("concat", [ys], {"axis": -1})
    assert check_sharded(op, (np.concatenate(ys, axis=1),), exact=True, seed=2) > 0


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis: int) -> None:
    xs = [_x(3, 4), _x(3, 4), _x(3, 4)]
    op = Op("stack", [xs], {"axis": axis})
    want = (np.stack(xs, axis=axis),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=3 + axis) > 0


def test_add_n() -> None:
    xs = [_x(4, 6), _x(4, 6), _x(4, 6)]
    op = Op("add_n", [xs])
    want = (xs[0] + xs[1] + xs[2],)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=False, seed=4) > 0


@pytest.mark.parametrize(
    ("shape", "sections", "axis"), [([7, 4], [2, -1, 3], 0), ([4, 9], [3, 3, 3], 1),
                                    ([5, 6], [0, 6], -1)]
)
def test_split(shape: list[int], sections: list[int], axis: int) -> None:
    x = _x(*shape)
    op = Op("split", [x], {"sections": sections, "axis": axis})
    sizes = [s for s in sections if s != -1]
    if -1 in sections:
        sizes.insert(sections.index(-1), shape[axis] - sum(sizes))
    want = (np.split(x, np.cumsum(sizes)[:-1], axis=axis),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=5) > 0


def test_split_sections_become_local_sections() -> None:
    """With the split axis sharded, each rank returns the part of every piece inside its rows."""
    mesh = mesh_of((2,))
    x = _x(7, 2)
    op = Op("split", [x], {"sections": [2, 3, 2], "axis": 0})
    ctx = LocalContext("split", mesh, (1,), (x.shape,), (DistAttr(mesh, [0, -1]),),
                       op.out_shapes, ((DistAttr(mesh, [-1, -1]),) * 3,), op.full_attrs)
    (pieces,) = get_kernel("split")(ctx, [x[4:]])  # rank 1 holds rows 4..6
    assert isinstance(pieces, list)
    assert [p.shape[0] for p in pieces] == [0, 1, 2]
    assert_same(pieces, [x[4:4], x[4:5], x[5:7]], exact=True)


def test_split_with_num_and_unbind() -> None:
    x = _x(4, 6)
    op = Op("split_with_num", [x], {"num": 3, "axis": 1})
    want = (np.split(x, 3, axis=1),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=6) > 0
    y = _x(2, 3, 4)
    for axis in (0, -1):
        op = Op("unbind", [y], {"axis": axis})
        want = ([np.take(y, i, axis=axis) for i in range(y.shape[axis])],)
        check_serial(op, want, exact=True)
        assert check_sharded(op, want, exact=True, seed=7) > 0


def test_unbind_refuses_a_sharded_axis() -> None:
    mesh = mesh_of((2,))
    op = Op("unbind", [_x(4, 3)], {"axis": 0})
    with pytest.raises(ShardMismatch, match="replicate x dim 0"):
        op.run([DistAttr(mesh, [0, -1])], [(DistAttr(mesh, [-1]),) * 4],
               np.random.default_rng(0))


@pytest.mark.parametrize("name", ["default_data_parallel", "default_", "replicated"])
def test_generic_rules_run_the_row_wise_identity(name: str) -> None:
    ins = [_x(8, 3), _x(8), _x(5, 2)]
    op = Op(name, [ins], outs=[(8, 3), (8,)])
    want = ([ins[0], ins[1]],)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=8) > 0


def test_generic_rules_refuse_an_output_without_its_input() -> None:
    mesh = mesh_of((2,))
    op = Op("replicated", [[_x(4, 3)]], outs=[(4, 3), (4,)])
    a = DistAttr(mesh, [-1, -1])
    with pytest.raises(UnsupportedError, match=r"outs\[1\].*no ins\[1\]"):
        op.run([[a]], [(a, DistAttr(mesh, [-1]))], np.random.default_rng(0))


# ---- nn ----------------------------------------------------------------------------------------------
def _ref_log_softmax(x: Array, axis: int) -> Array:
    ex = np.exp(x)
    out: Array = np.log(ex / ex.sum(axis=axis, keepdims=True))
    return out


@pytest.mark.parametrize(("name", "shape", "axis"), [
    ("softmax", [4, 5, 6], -1), ("softmax", [4, 5, 6], 1), ("log_softmax", [3, 7], 0),
    ("log_softmax", [4, 5, 6], -1), ("softmax", [], -1), ("log_softmax", [], 0),
])
def test_softmax(name: str, shape: list[int], axis: int) -> None:
    x = _x(*shape)
    op = Op(name, [x], {"axis": axis})
    ls = _ref_log_softmax(x.reshape(1), 0).reshape(x.shape) if not shape else \
        _ref_log_softmax(x, axis)
    want = (ls if name == "log_softmax" else np.exp(ls),)
    check_serial(op, want, exact=False)
    assert check_sharded(op, want, exact=False, seed=9) > 0


def test_softmax_refuses_a_cut_row_and_a_partial_input() -> None:
    mesh = mesh_of((2,))
    op = Op("softmax", [_x(4, 6)], {"axis": -1})
    cut = DistAttr(mesh, [-1, 0])
    with pytest.raises(ShardMismatch, match="whole row"):
        op.run([cut], [cut], np.random.default_rng(0))
    part = DistAttr(mesh, [-1, -1], {0: "sum"})
    with pytest.raises(UnsupportedError, match="partial"):
        op.run([part], [DistAttr(mesh, [-1, -1])], np.random.default_rng(0))


def _ref_layer_norm(x: Array, scale: Array | None, bias: Array | None, eps: float, bna: int
                    ) -> tuple[Array, Array, Array]:
    rows = x.reshape(*x.shape[:bna], -1)
    mean = rows.mean(axis=-1)
    var = ((rows - mean[..., None]) ** 2).mean(axis=-1)
    y = (rows - mean[..., None]) / np.sqrt(var[..., None] + eps)
    y = y * (1.0 if scale is None else scale) + (0.0 if bias is None else bias)
    return y.reshape(x.shape), mean, var


@pytest.mark.parametrize(("bna", "params"), [(1, True), (2, True), (1, False), (3, True)])
def test_layer_norm(bna: int, params: bool) -> None:
    x = _x(4, 3, 5, 2)
    size = int(np.prod(x.shape[bna:]))
    scale, bias = (_x(size), _x(size)) if params else (None, None)
    op = Op("layer_norm", [x, scale, bias], {"epsilon": 1e-5, "begin_norm_axis": bna})
    want = _ref_layer_norm(x, scale, bias, 1e-5, bna)
    check_serial(op, want, exact=False)
    assert check_sharded(op, want, exact=False, seed=10 + bna) > 0


def test_fused_rms_norm() -> None:
    x, scale = _x(4, 3, 6), _x(6)
    op = Op("fused_rms_norm", [x, scale], {"epsilon": 1e-6})
    inv = 1.0 / np.sqrt((x**2).mean(axis=-1) + 1e-6)
    want = (x * inv[..., None] * scale, inv)
    check_serial(op, want, exact=False)
    assert check_sharded(op, want, exact=False, seed=11) > 0


def _ids(shape: Sequence[int], vocab: int) -> Array:
    return RNG.integers(0, vocab, size=shape).astype(np.int64)


@pytest.mark.parametrize(("name", "padding_idx"), [
    ("embedding", -1), ("lookup_table_v2", -1), ("embedding", 3), ("embedding", -2),
])
def test_embedding(name: str, padding_idx: int) -> None:
    vocab = 10
    ids, w = _ids((3, 5), vocab), _x(vocab, 4)
    ids[0, :2] = [3, vocab - 2]  # the padding rows, when there is one
    op = Op(name, [ids, w], {"padding_idx": padding_idx})
    ref = w[ids]
    if padding_idx != -1:
        ref[ids == padding_idx % vocab] = 0.0
    check_serial(op, (ref,), exact=True)
    # vocab-sharded weight rows yield the partial sum the rule claims
    assert check_sharded(op, (ref,), exact=False, seed=12) > 0


def test_vocab_parallel_embedding_masks_foreign_ids() -> None:
    mesh = mesh_of((2,))
    ids, w = np.array([[0, 4, 2]]), _x(5, 3)  # rank 0 holds rows 0..2, rank 1 rows 3..4
    op = Op("embedding", [ids, w])
    info = op.infer([DistAttr(mesh, [-1, -1]), DistAttr(mesh, [0, -1])], None)
    (out_attr,) = info.outputs
    assert isinstance(out_attr, DistAttr) and out_attr.partial_items == ((0, "sum"),)
    in_attrs, out_attrs = op.attributes(info)
    assert_same(op.run(in_attrs, out_attrs, np.random.default_rng(0)), [w[ids]], exact=True)
    ctx = LocalContext("embedding", mesh, (1,), (ids.shape, w.shape), in_attrs, op.out_shapes,
                       out_attrs, op.full_attrs)
    (local,) = get_kernel("embedding")(ctx, [ids, w[3:]])
    assert_same(local, np.stack([[np.zeros(3), w[4], np.zeros(3)]]), exact=True)


def test_embedding_refuses_ids_outside_the_vocabulary() -> None:
    op = Op("embedding", [np.array([[0, 7]]), _x(5, 3)])
    with pytest.raises(KernelInputError, match=r"id 7 outside the vocabulary 0\.\.4"):
        check_serial(op, (np.zeros((1, 2, 3)),), exact=True)


def _ref_ce(x: Array, label: Array, soft: bool, use_softmax: bool, ignore: int, axis: int
            ) -> tuple[Array, Array]:
    logp = _ref_log_softmax(x, axis) if use_softmax else np.log(x)
    prob = np.exp(logp) if use_softmax else x
    if soft:
        return prob, -np.sum(label * logp, axis=axis, keepdims=True)
    safe = np.where(label == ignore, 0, label)
    loss = -np.take_along_axis(logp, safe, axis=axis)
    return prob, np.where(label == ignore, 0.0, loss)


CE_CASES = [
    # (x shape, axis, soft_label, use_softmax)
    ((4, 5, 7), -1, False, True),
    ((4, 6, 3), 1, False, True),
    ((4, 5), -1, True, True),
    ((3, 4, 5), -1, False, False),
    ((6, 4), 0, True, False),
]


def _ce_inputs(shape: tuple[int, ...], axis: int, soft: bool, use_softmax: bool
               ) -> tuple[Array, Array]:
    ax = axis % len(shape)
    x = _x(*shape)
    if not use_softmax:
        x = np.exp(x) / np.exp(x).sum(axis=ax, keepdims=True)  # probabilities
    if soft:
        lab = np.abs(_x(*shape))
        return x, lab / lab.sum(axis=ax, keepdims=True)
    lab_shape = (*shape[:ax], 1, *shape[ax + 1 :])
    lab = RNG.integers(0, shape[ax], size=lab_shape).astype(np.int64)
    lab.flat[::5] = -100  # ignored rows
    return x, lab


@pytest.mark.parametrize("name", ["cross_entropy_with_softmax", "softmax_with_cross_entropy"])
@pytest.mark.parametrize(("shape", "axis", "soft", "use_softmax"), CE_CASES)
def test_cross_entropy(name: str, shape: tuple[int, ...], axis: int, soft: bool,
                       use_softmax: bool) -> None:
    x, label = _ce_inputs(shape, axis, soft, use_softmax)
    op = Op(name, [x, label], {"soft_label": soft, "use_softmax": use_softmax, "axis": axis})
    want = _ref_ce(x, label, soft, use_softmax, -100, axis % len(shape))
    check_serial(op, want, exact=False)
    assert check_sharded_ce(op, want, seed=13) > 0


class ThreadedMesh:
    """Every mesh coordinate in a thread; ``allreduce`` combines the ranks that differ only on
    ``over`` (the class axis's mesh dims), as the executor's collective would."""

    def __init__(self, mesh: ProcessMesh, over: Sequence[int]) -> None:
        self.coords = [tuple(c) for c in np.ndindex(*mesh.shape)]
        self.over = set(over)
        self.barrier = threading.Barrier(len(self.coords), timeout=20)
        self.box: dict[tuple[int, tuple[int, ...]], Array] = {}

    def allreduce(self, coord: tuple[int, ...]) -> AllReduce:
        calls = [0]

        def reduce_(local: Array, how: str) -> Array:
            k = calls[0]
            calls[0] += 1
            self.box[k, coord] = local
            self.barrier.wait()
            peers = [self.box[k, c] for c in self.coords if all(
                c[d] == coord[d] for d in range(len(coord)) if d not in self.over)]
            out: Array = np.max(peers, axis=0) if how == "max" else np.sum(peers, axis=0)
            self.barrier.wait()
            return out

        return reduce_


def run_vocab_parallel(op: Op, in_attrs: Sequence[Any], out_attrs: Sequence[Any],
                       rng: np.random.Generator) -> list[Any]:
    mesh = in_attrs[0].mesh
    xs = [x for x in op.args if isinstance(x, np.ndarray)]
    axis = op.full_attrs["axis"] % xs[0].ndim
    tm = ThreadedMesh(mesh, in_attrs[0].multi_dims_mapping[axis])
    scattered = [scatter(x, a, rng) for x, a in zip(xs, in_attrs, strict=True)]
    blocks: dict[tuple[int, ...], Any] = {}
    errors: list[BaseException] = []

    def rank(c: tuple[int, ...]) -> None:
        ctx = LocalContext(op.name, mesh, c, tuple(_shape_of(x) for x in op.args),
                           tuple(in_attrs), op.out_shapes, tuple(out_attrs), op.full_attrs)
        try:
            blocks[c] = cross_entropy(ctx, [s[c] for s in scattered], tm.allreduce(c))
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            tm.barrier.abort()

    threads = [threading.Thread(target=rank, args=(c,)) for c in tm.coords]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return op.gather(blocks, out_attrs)


def check_sharded_ce(op: Op, want: Sequence[Any], seed: int) -> int:
    """check_sharded, with the vocab-parallel cases run on threads with a real allreduce (the
    local kernel must refuse them)."""
    rng = np.random.default_rng(seed)
    ran = 0
    x = op.args[0]
    assert isinstance(x, np.ndarray)
    axis = op.full_attrs["axis"] % x.ndim
    for ms in MESHES:
        mesh = mesh_of(ms)
        for k in range(12):
            ins = [_random_like(a, mesh, rng, partial=k % 3 == 0) for a in op.args]
            outs = [_random_out(s, mesh, rng) for s in op.out_shapes] if k % 2 else None
            try:
                info = op.infer(ins, outs)
            except SpmdError:
                continue
            in_attrs, out_attrs = op.attributes(info)
            cut = shard_index(in_attrs[0], axis, (0,) * mesh.ndim)[1] > 1
            vocab_parallel = not op.full_attrs["soft_label"] and op.full_attrs["use_softmax"]
            if cut and not vocab_parallel:
                # Only the vocab-parallel kernel may cut the classes; the forward rule lets a
                # soft label's class shard through (reported), and the kernel refuses it.
                with pytest.raises(ShardMismatch, match="need every class"):
                    op.run(in_attrs, out_attrs, rng)
                continue
            if cut:
                with pytest.raises(UnsupportedError, match="the classes"):
                    op.run(in_attrs, out_attrs, rng)
                got = run_vocab_parallel(op, in_attrs, out_attrs, rng)
            else:
                got = op.run(in_attrs, out_attrs, rng)
            assert_same(got, want, exact=False)
            ran += 1
    return ran


def test_vocab_parallel_cross_entropy_runs_with_an_allreduce() -> None:
    x, label = _ce_inputs((4, 9), -1, False, True)
    op = Op("cross_entropy_with_softmax", [x, label])
    mesh = mesh_of((2, 2))
    info = op.infer([DistAttr(mesh, [0, 1]), DistAttr(mesh, [0, -1])], None)
    in_attrs, out_attrs = op.attributes(info)
    assert in_attrs[0].multi_dims_mapping == ((0,), (1,))  # the rule keeps the classes cut
    assert out_attrs[1].partial_items == ()  # and the loss complete
    got = run_vocab_parallel(op, in_attrs, out_attrs, np.random.default_rng(0))
    assert_same(got, _ref_ce(x, label, False, True, -100, 1), exact=False)


def test_vocab_parallel_cross_entropy_with_empty_class_blocks() -> None:
    """3 classes over 4 ranks: the rank without classes still joins every allreduce."""
    x, label = _ce_inputs((2, 3), -1, False, True)
    x -= 10.0  # a negative row max: an empty block must not pull the shift to 0
    op = Op("softmax_with_cross_entropy", [x, label])
    mesh = mesh_of((4,))
    info = op.infer([DistAttr(mesh, [-1, 0]), DistAttr(mesh, [-1, -1])], None)
    in_attrs, out_attrs = op.attributes(info)
    assert in_attrs[0].multi_dims_mapping == ((), (0,))
    got = run_vocab_parallel(op, in_attrs, out_attrs, np.random.default_rng(0))
    assert_same(got, _ref_ce(x, label, False, True, -100, 1), exact=False)
