"""Every kind of bad graph raises its own typed error naming the node and the fix."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules import ops
from spmdrules.graph.errors import (
    ArityError,
    DuplicateNameError,
    GraphContextError,
    GraphCycleError,
    GraphError,
    GraphUnknownOpError,
    InvalidNameError,
    OpAttributeError,
    ProducerError,
    ShapeError,
    UnknownNodeError,
    UnknownTensorError,
)
from spmdrules.graph.graph import Graph


@pytest.fixture
def g() -> Graph:
    g = Graph("v")
    g.input("x", [4, 8])
    g.param("w", [8, 2])
    return g


def test_unknown_op_suggests_close_names(g: Graph) -> None:
    with pytest.raises(GraphUnknownOpError, match=r"op 'n1': unknown op type 'matmull'") as e:
        g.add_op("matmull", ["x", "w"], name="n1")
    assert "matmul" in e.value.suggestions
    assert isinstance(e.value, sr.UnknownOpError) and isinstance(e.value, sr.SpmdError)
    assert e.value.node == "n1"
    assert g.num_ops == 0


def test_gradient_rules_are_not_graph_ops(g: Graph) -> None:
    with pytest.raises(GraphUnknownOpError, match="gradient rule") as e:
        g.add_op("gelu_grad", ["x", "x"], name="n1")
    assert e.value.suggestions == ["gelu"]


def test_unknown_op_function_is_an_attribute_error_too() -> None:
    with pytest.raises(GraphUnknownOpError, match=r"'relux'.*Did you mean 'relu"):
        _ = ops.relux
    assert not hasattr(ops, "relux")
    with pytest.raises(AttributeError):
        _ = ops.__nothing__


def test_wrong_arity(g: Graph) -> None:
    with pytest.raises(ArityError, match=r"op 'mm' \(matmul\): takes 2 tensor operand\(s\) but 3"):
        g.add_op("matmul", ["x", "w", "w"], name="mm")
    with pytest.raises(ArityError, match=r"op 'mm' \(matmul\): missing tensor operand 'y'"):
        g.add_op("matmul", ["x"], name="mm")
    with pytest.raises(ArityError, match="operand 'x' is a list of tensors"):
        g.add_op("concat", ["x"], name="cat")
    with pytest.raises(ArityError, match=r"ops.matmul: takes 4 arguments"):
        ops.matmul(g.tensor("x"), g.tensor("w"), False, False, True)
    with pytest.raises(ArityError, match="missing tensor argument 'y'"):
        ops.matmul(g.tensor("x"))
    with pytest.raises(ArityError, match="given twice"):
        ops.matmul(g.tensor("x"), g.tensor("w"), y=g.tensor("w"))
    with pytest.raises(ArityError, match="must be a tensor of the graph"):
        g.add_op("relu", [3.0], name="r")
    assert g.num_ops == 0


def test_attribute_errors(g: Graph) -> None:
    x = g.tensor("x")
    with pytest.raises(OpAttributeError, match="unknown argument 'transpose_y'; did you mean 'trans_y'"):
        ops.matmul(x, g.tensor("w"), transpose_y=True)
    with pytest.raises(OpAttributeError, match=r"op 'mm' \(matmul\): attribute 'trans_x' must be a bool"):
        g.add_op("matmul", ["x", "w"], {"trans_x": "yes"}, name="mm")
    with pytest.raises(OpAttributeError, match="unknown attribute 'axes'; did you mean 'axis'"):
        g.add_op("sum", ["x"], {"axes": [0]}, name="s")
    with pytest.raises(OpAttributeError, match="attribute 'shape' is required"):
        ops.reshape(x)
    with pytest.raises(OpAttributeError, match="'epsilon' must be a float"):
        ops.layer_norm(x, epsilon="small")
    with pytest.raises(OpAttributeError, match="attributes must be a mapping"):
        g.add_op("sum", ["x"], [[0], False], name="s")  # type: ignore[arg-type]


def test_mismatched_shapes_name_op_tensor_and_dim(g: Graph) -> None:
    x = g.tensor("x")
    msg = r"op 'mm' \(matmul\): y: contracted dim has size 4 but x's has size 8"
    with pytest.raises(ShapeError, match=msg):
        ops.matmul(x, x, name="mm")
    with pytest.raises(ShapeError, match=r"op 'r' \(reshape\): shape: \[3, -1\] cannot hold"):
        ops.reshape(x, [3, -1], name="r")
    assert g.num_ops == 0


def test_declared_result_with_wrong_shape(g: Graph) -> None:
    g.declare("y", [4, 3])
    msg = r"op 'mm': result 'y' was declared \[4, 3\] float32 but the op produces \[4, 2\]"
    with pytest.raises(ShapeError, match=msg):
        g.add_op("matmul", ["x", "w"], name="mm", results=["y"])


def test_cycle_is_found_by_networkx_and_names_the_ops() -> None:
    g = Graph("loop")
    g.declare("a", [4])
    g.declare("b", [4])
    g.add_op("relu", ["a"], name="f", results=["b"])
    g.add_op("exp", ["b"], name="h", results=["a"])
    with pytest.raises(GraphCycleError, match=r"graph 'loop' has a cycle: op (f -> h -> f|h -> f -> h)"):
        g.validate()
    with pytest.raises(GraphCycleError):
        g.topological_order()


def test_cycle_detected_when_the_with_block_ends() -> None:
    with pytest.raises(GraphCycleError), Graph("loop") as g:
        g.declare("a", [4])
        g.add_op("relu", ["a"], name="f", results=["a"])


def test_duplicate_names(g: Graph) -> None:
    with pytest.raises(DuplicateNameError, match="tensor 'x' already exists"):
        g.input("x", [1])
    g.add_op("relu", ["x"], name="r")
    with pytest.raises(DuplicateNameError, match="op 'r' already exists"):
        g.add_op("relu", ["x"], name="r")
    with pytest.raises(DuplicateNameError, match="result 'r' is already produced by op 'r'"):
        g.add_op("exp", ["x"], name="e", results=["r"])
    with pytest.raises(InvalidNameError, match="tensor name 'bad name' is not a valid name"):
        g.input("bad name", [1])
    with pytest.raises(InvalidNameError, match="op name '' is not a valid name"):
        g.add_op("relu", ["x"], name="")
    with pytest.raises(UnknownNodeError, match="has no op 'rr'; did you mean 'r'"):
        g.op("rr")


def test_producers(g: Graph) -> None:
    with pytest.raises(ProducerError, match="result 'x' is a graph input"):
        g.add_op("relu", ["w"], name="r", results=["x"])
    g.declare("dangling", [2])
    with pytest.raises(ProducerError, match="tensor 'dangling' was declared but no op produces it"):
        g.validate()


def test_unknown_tensor_and_cross_graph_operands(g: Graph) -> None:
    with pytest.raises(UnknownTensorError, match="has no tensor 'xx'; did you mean 'x'"):
        g.add_op("relu", ["xx"], name="r")
    other = Graph("other")
    y = other.input("y", [4, 8])
    with pytest.raises(GraphContextError, match="operands come from graphs 'v' and 'other'"):
        ops.add(g.tensor("x"), y)
    with pytest.raises(GraphContextError, match="tensor 'y' of graph 'other', not of graph 'v'"):
        g.add_op("add", ["x", y], name="a")
    with g, pytest.raises(GraphContextError, match="graph 'v' is active"):
        ops.relu(y)


def test_bad_shapes_and_dtypes_of_tensors() -> None:
    g = Graph()
    with pytest.raises(ShapeError, match="dim 1 is -3"):
        g.input("x", [2, -3])
    with pytest.raises(ShapeError, match="dim 0 is 'a'"):
        g.input("x", ["a"])  # type: ignore[list-item]
    with pytest.raises(ShapeError, match=r"dtype 'float33'.*did you mean 'float32'"):
        g.input("x", [2], "float33")


def test_generic_rule_needs_declared_results() -> None:
    if "replicated" not in sr.list_rules():
        pytest.skip("replicated is not registered")
    with Graph() as g:
        x = g.input("x", [2])
        with pytest.raises(ArityError, match="outs="):
            ops.replicated([x])
        with pytest.raises(ArityError, match="result_metas is only for generic rules"):
            g.add_op("relu", [x], result_metas=[([2], "float32")])


def test_validate_full_reinfers_shapes(g: Graph) -> None:
    op = g.add_op("matmul", ["x", "w"], name="mm")
    op.outputs[0].shape = (4, 3)  # corrupt it, as a bad loader might
    with pytest.raises(ShapeError, match=r"op 'mm': result 'mm' is \[4, 3\]"):
        g.validate(full=True)


def test_every_graph_error_is_an_spmd_error() -> None:
    assert issubclass(GraphError, sr.SpmdError)
    for cls in (ArityError, DuplicateNameError, GraphCycleError, OpAttributeError, ShapeError,
                ProducerError, UnknownTensorError, GraphContextError, GraphUnknownOpError,
                InvalidNameError, UnknownNodeError):
        assert issubclass(cls, GraphError)
