"""Building graphs: handles, op functions, results, queries."""

from __future__ import annotations

import inspect
import keyword

import networkx as nx
import pytest

import spmdrules as sr
from spmdrules import ops
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor, tensor_meta
from spmdrules.graph.opschema import op_schema


def test_ops_on_handles_build_a_bipartite_networkx_graph() -> None:
    with Graph("tiny") as g:
        x = g.input("x", [8, 16])
        w = g.param("w", [16, 32])
        h = ops.matmul(x, w, name="mm")
        y = ops.relu(h)
    assert isinstance(h, Tensor) and h.name == "mm" and h.shape == (8, 32)
    assert y.shape == (8, 32) and y.dtype == "float32"
    assert g.num_ops == 2 and g.num_tensors == 4
    assert isinstance(g.nx, nx.DiGraph) and nx.is_directed_acyclic_graph(g.nx)
    mm = g.op("mm")
    assert set(g.nx.predecessors(mm)) == {x, w} and set(g.nx.successors(mm)) == {h}
    assert g.producer(h) is mm and h.producer is mm and x.producer is None
    assert g.consumers(h) == (g.op(y.name),) and h.consumers == g.consumers("mm")
    assert [op.name for op in g.ops] == ["mm", y.name]
    assert [op.order for op in g.ops] == [0, 1]
    assert [t.order for t in g.tensors] == [0, 1, 2, 3] and g.tensors == (w, x, h, y)
    assert g.inputs == (x,) and g.params == (w,)
    assert "mm" in g and mm in g and "nope" not in g


def test_ordered_operands_results_and_attributes() -> None:
    with Graph() as g:
        x = g.input("x", [4, 6])
        y = g.input("y", [5, 6])
        out = ops.matmul(x, y, False, True, name="mm")
    op = g.op("mm")
    assert op.type == "matmul" and op.operands == (x, y) and op.results == (out,)
    assert op.inputs == (x, y) and op.outputs == (out,)
    assert op.attrs == (False, True) and op.attr("trans_y") is True
    assert op.attr_dict == {"trans_x": False, "trans_y": True}
    assert op.rule is sr.get_rule("matmul")
    # the stored attributes are exactly the rule's positional tail
    spec = sr.TensorSpec
    mesh = sr.ProcessMesh([0, 1])
    info = op.rule.infer_forward(
        spec(x.shape, sr.DistAttr(mesh, [0, -1])), spec(y.shape, sr.DistAttr(mesh, [-1, -1])), *op.attrs
    )
    out = info.outputs[0]
    assert isinstance(out, sr.DistAttr) and out.dims_mapping == (0, -1)


def test_multi_output_and_list_arguments() -> None:
    with Graph() as g:
        x = g.input("x", [2, 6, 8])
        scale = g.param("s", [8])
        out, mean, var = ops.layer_norm(x, scale, None, 1e-5, 2, name="ln")
        parts = ops.split(out, sections=[2, -1], axis=1, name="sp")
        cat = ops.concat(list(parts), axis=1)
        stacked = ops.stack([out, out], axis=0)
    assert (out.name, mean.name, var.name) == ("ln.out", "ln.mean", "ln.variance")
    assert mean.shape == (2, 6) and var.shape == (2, 6)
    assert isinstance(parts, tuple) and [p.name for p in parts] == ["sp.0", "sp.1"]
    assert [p.shape for p in parts] == [(2, 2, 8), (2, 4, 8)]
    assert cat.shape == (2, 6, 8) and stacked.shape == (2, 2, 6, 8)
    ln = g.op("ln")
    assert ln.operands == (x, scale, None) and ln.inputs == (x, scale)
    assert g.op(cat.name).operands == (parts,)
    assert [o.index for o in ln.outputs] == [0, 1, 2]


def test_numpy_operators_and_transpose_property() -> None:
    with Graph() as g:
        a = g.input("a", [3, 4])
        b = g.input("b", [4])
        w = g.param("w", [4, 5])
        c = (a + b) * a - a / a
        d = c @ w
        t = d.T
    # ties in the topological order break by name, not by build order
    assert [op.type for op in g.ops] == ["add", "divide", "multiply", "subtract", "matmul", "transpose"]
    assert d.shape == (3, 5) and t.shape == (5, 3)
    with pytest.raises(sr.SpmdError):
        _ = a + 1  # type: ignore[operator]


def test_every_registered_op_is_callable_with_the_rule_signature() -> None:
    names = ops.names()
    assert "matmul" in names and not any(n.endswith("_grad") for n in names)
    assert set(names) <= set(dir(ops))
    for n in names:
        f = getattr(ops, n)
        schema = op_schema(n)
        params = list(inspect.signature(f).parameters)
        attrs = [a.name for a in (*schema.attrs, *schema.op_attrs)]
        expected = [p.name for p in schema.inputs] + [a for a in attrs if not keyword.iskeyword(a)]
        assert params[: len(expected)] == expected, n
        # an attribute Paddle names with a Python keyword (mish's lambda) goes by **attrs
        assert params[-1] == ("attrs" if len(expected) < len(schema.inputs) + len(attrs) else "name")
    assert inspect.signature(ops.matmul).parameters["trans_y"].default is False
    assert "MatmulInferSpmd" in (ops.matmul.__doc__ or "")


def test_ops_by_keyword_and_position_agree() -> None:
    with Graph() as g:
        x = g.input("x", [2, 3, 4])
        a = ops.sum(x, [1], True)
        b = ops.sum(x=x, axis=[1], keep_dim=True)
        c = ops.reshape(x, [0, -1])
    assert g.op(a.name).attrs == g.op(b.name).attrs == ((1,), True)
    assert c.shape == (2, 12)


def test_ops_need_a_graph_and_infer_it_from_operands() -> None:
    g = Graph("outer")
    x = g.input("x", [2, 2])
    y = ops.relu(x)  # no context: the operands' graph
    assert y.graph is g and g.num_ops == 1


def test_auto_names_skip_taken_names() -> None:
    with Graph() as g:
        x = g.input("relu_0", [2])
        y = ops.relu(x)
        z = ops.relu(y)
    assert y.name == "relu_1" and z.name == "relu_2"


def test_low_level_add_op_with_names_and_declared_results() -> None:
    g = Graph()
    g.input("x", [4, 8])
    g.param("w", [8, 2])
    g.declare("y", [4, 2])
    op = g.add_op("matmul", ["x", "w"], {"trans_x": False}, name="mm", results=["y"])
    assert isinstance(op, Op) and g.tensor("y").producer is op
    g.validate(full=True)


def test_summary_and_repr() -> None:
    with Graph("m") as g:
        x = g.input("x", [2, 3])
        ops.relu(x, name="r")
    text = g.summary()
    assert "Graph('m': 1 ops, 2 tensors, 0 annotated)" in text and "r[2, 3] = relu(x)" in text
    assert repr(g.op("r")) == "Op('r': r = relu(x))"
    assert repr(x) == "Tensor('x', shape=[2, 3], dtype=float32)"


def test_reverse_attributes_follow_the_reverse_rule() -> None:
    mesh = sr.ProcessMesh([0, 1])
    with Graph() as g:
        x = g.input("x", [4, 6])
        y = ops.reduce_base(x, [1], False, 1, name="r")
        z = ops.sum(x, [1], name="s")
    r, s = g.op("r"), g.op("s")
    assert r.attrs == ((1,), False, 1) and r.reverse_attrs == ((1,), False)
    assert s.reverse_attrs == s.attrs
    spec = sr.TensorSpec
    info = r.rule.infer_reverse(spec(x.shape, sr.DistAttr(mesh, [-1, -1])),
                                spec(y.shape, sr.DistAttr(mesh, [0])), *r.reverse_attrs)
    first = info.inputs[0]
    assert isinstance(first, sr.DistAttr) and first.dims_mapping == (0, -1)
    assert z.nbytes == 16 and x.numel == 24 and g.input("ids", [3], "int64").nbytes == 24


def test_tensor_meta_reads_shape_and_dtype_as_they_are_now() -> None:
    # the public accessor completion's index reads every tensor's shape and dtype through
    with Graph("meta") as g:
        x = g.input("x", [8, 16], dtype="float16")
        y = ops.relu(x)
    assert tensor_meta(x) == ((8, 16), "float16") == (x.shape, x.dtype)
    assert [tensor_meta(t) for t in g.tensors] == [(t.shape, t.dtype) for t in g.tensors]
    y.shape, y.dtype = (4, 16), "float32"  # a set shape or dtype is what the accessor reads
    assert tensor_meta(y) == ((4, 16), "float32")
    with pytest.raises(AttributeError):
        tensor_meta(object())  # type: ignore[arg-type]  # not a tensor: no slots to read
