"""The constants full, full_like and arange: placed as their consumer needs, else replicated;
shapes as numpy's; kernels that fill any block; errors that name the op and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import spmdrules as sr
from spmdrules.completion import complete
from spmdrules.core.shards import coords, gather
from spmdrules.execution.executor import run_serial
from spmdrules.execution.local import LocalContext, get_kernel
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph import ops
from spmdrules.graph.errors import GraphContextError, OpAttributeError, ShapeError
from spmdrules.graph.graph import Graph
from spmdrules.graph.shapes import TensorMeta, infer_meta

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def _attr(mapping: list[int], partial: dict[int, str] | None = None) -> sr.DistAttr:
    return sr.DistAttr(MESH, mapping, partial=partial or {})


def test_a_constant_is_placed_as_its_consumer_needs_and_forward_leaves_it_unplaced() -> None:
    full = sr.get_rule("full")
    assert full.infer_forward([4, 6], 1.0, "float32").outputs == (None,)
    out = sr.TensorSpec([4, 6], _attr([1, -1], {0: "sum"}))
    info = full.infer_reverse(out, shape=[4, 6])
    assert info.inputs == () and info.outputs == (_attr([1, -1]),)  # complete on every rank
    rev = sr.get_rule("arange").infer_reverse(sr.TensorSpec([5], _attr([0])), end=5.0)
    assert rev.outputs == (_attr([0]),)


def test_full_like_takes_x_s_dims_and_leaves_x_as_it_is() -> None:
    x = sr.TensorSpec([4, 6], _attr([0, -1], {1: "sum"}))
    info = sr.get_rule("full_like").infer_forward(x, 2.0)
    assert info.inputs == (x.attr,) and info.outputs == (_attr([0, -1]),)
    out = sr.TensorSpec([4, 6], _attr([-1, 1]))
    rev = sr.get_rule("full_like").infer_reverse(x, out)
    assert rev.inputs == (x.attr,) and rev.outputs == (out.attr,)


@pytest.mark.parametrize(("start", "end", "step"), [
    (0, 7, 1), (2, 11, 3), (5, -3, -2), (0.5, 3.25, 0.75), (3, 3, 1), (4, 0, 1), (-1.5, 2, 0.5),
])
def test_arange_has_numpy_s_length_and_values(start: float, end: float, step: float) -> None:
    attrs = {"start": start, "end": end, "step": step, "dtype": ""}
    want = np.arange(start, end, step)
    (meta,) = infer_meta("arange", [], attrs)
    integral = all(float(v).is_integer() for v in (start, end, step))
    assert meta == TensorMeta((len(want),), "int64" if integral else "float32")
    with Graph() as g:
        r = ops.arange(start, end, step, name="r")
    np.testing.assert_allclose(run_serial(g, {})[r.name], want)


def test_full_and_full_like_shapes_and_dtypes() -> None:
    assert infer_meta("full", [], {"shape": (2, 0, 3), "value": 1.0, "dtype": "int32"}) == (
        TensorMeta((2, 0, 3), "int32"),)
    x = TensorMeta((5, 2), "float64")
    assert infer_meta("full_like", [x], {"value": 0.0, "dtype": ""}) == (x,)
    assert infer_meta("full_like", [x], {"value": 0.0, "dtype": "bool"}) == (
        TensorMeta((5, 2), "bool"),)


@pytest.mark.parametrize(("op", "attrs", "match"), [
    ("full", {"shape": [2, -1]}, r"shape: dim 1 is -1.*give every size as an int >= 0"),
    ("full", {"shape": [2], "dtype": "float8"}, r"dtype: 'float8' is not a dtype.*use one of"),
    ("full", {"shape": [2], "value": 2**31, "dtype": "int32"},
     r"value: 2147483648 does not fit int32; give a value in \[-2147483648, 2147483647\]"),
    ("arange", {"start": 0.0}, r"end: is required; pass end="),
    ("arange", {"end": 4.0, "step": 0.0}, r"step: .*no finite range; use finite bounds and a "
                                          r"non-zero step"),
])
def test_bad_constants_name_the_op_and_the_fix(op: str, attrs: dict[str, object], match: str
                                               ) -> None:
    with Graph() as g, pytest.raises(ShapeError, match=match):
        g.add_op(op, [], attrs, name="c")


def test_an_integer_fill_stays_exact_in_the_graph_the_model_file_and_the_kernels(
        tmp_path: Path) -> None:
    """``value`` is Paddle's Scalar: an int stays an int (an int64 fill of 2**53 + 1 went through
    a float and came out 2**53)."""
    from spmdrules.graph.exchange import dump, load

    big = 2**53 + 1
    with Graph("g") as g:
        x = g.input("x", [2, 2], "int64")
        ops.full(shape=[2, 2], value=big, dtype="int64", name="f")
        ops.full_like(x, value=-(2**62) - 1, name="l")
    assert g.op("f").attrs[1] == big and isinstance(g.op("f").attrs[1], int)
    dump(g, tmp_path / "g.json")
    back = load(tmp_path / "g.json")
    assert back == g and back.op("f").attrs[1] == big
    feeds = {"x": np.zeros((2, 2), np.int64)}
    want = {"f": np.full((2, 2), big), "l": np.full((2, 2), -(2**62) - 1)}
    serial = run_serial(back, feeds)
    sr.shard(back.tensor("x"), MESH, [0, 1])
    sim = run_simulated(lower(complete(back)), feeds)
    for name, w in want.items():
        for got in (serial[name], sim.fetch(name)):
            assert got.dtype == np.int64 and np.array_equal(got, w), name


def test_full_without_a_shape_is_refused_at_binding() -> None:
    with Graph() as g, pytest.raises(OpAttributeError, match=r"op 'c' \(full\): attribute "
                                                             r"'shape' is required"):
        g.add_op("full", [], {"value": 1.0}, name="c")
    assert g.num_ops == 0


def test_a_constant_needs_a_graph_to_be_built_in() -> None:
    with pytest.raises(GraphContextError, match="no graph is active"):
        ops.full(shape=[2])


def _run(op: str, shape: tuple[int, ...], attr: sr.DistAttr, attrs: dict[str, object]
         ) -> np.ndarray:
    kernel = get_kernel(op)
    blocks = {}
    for c in coords(attr):
        ctx = LocalContext(op, MESH, c, (), (), (shape,), (attr,), dict(attrs))
        (blocks[c],) = kernel(ctx, [])
    return gather(blocks, shape, attr)


def test_kernels_fill_every_block_of_any_layout() -> None:
    shape = (5, 7)
    for mapping in ([0, 1], [1, -1], [-1, -1], [-1, 0]):
        attr = _attr(mapping)
        got = _run("full", shape, attr, {"shape": shape, "value": 3.0, "dtype": "float64"})
        np.testing.assert_array_equal(got, np.full(shape, 3.0))
        got = _run("full", shape, attr, {"shape": shape, "value": 1.0, "dtype": "bool"})
        assert got.dtype == np.bool_ and got.all()
    for mapping in ([0], [1], [-1]):
        got = _run("arange", (6,), _attr(mapping),
                   {"start": 2.0, "end": 19.0, "step": 3.0, "dtype": ""})
        np.testing.assert_array_equal(got, np.arange(2, 19, 3))
        assert got.dtype == np.int64


def _causal_bias() -> tuple[Graph, str]:
    with Graph("causal") as g:
        s = g.input("scores", [2, 4, 6, 6])
        sr.shard(s, MESH, ["dp", "mp", None, None])
        q = ops.arange(end=6, name="q")
        ones = ops.full(shape=[4, 6, 6], value=1.0, dtype="float64", name="ones")
        b = ops.add(ops.add(s, ones, name="biased"), ops.full_like(q, 0.5, "float64"), name="out")
    return g, b.name


def test_completion_places_constants_as_consumers_need_and_runs_equal_to_serial() -> None:
    g, out = _causal_bias()
    c = complete(g)
    assert g.tensor("ones").attr == _attr([1, -1, -1])  # as the add needs it: heads on mp
    assert g.tensor("q").attr == _attr([-1])
    assert all(p.total_bytes == 0 for p in c.plans())
    feeds = {"scores": np.random.default_rng(1).standard_normal((2, 4, 6, 6))}
    got = run_simulated(lower(c), feeds)
    np.testing.assert_allclose(got.fetch(out), run_serial(g, feeds)[out], rtol=0, atol=0)
    assert sum(got.traffic.per_edge.values()) == sum(got.traffic.internal.values()) == 0
