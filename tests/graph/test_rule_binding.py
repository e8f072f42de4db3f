"""Graph ops bind to their rules: every op of the examples runs its rule forward and reverse
through Op.forward_args / reverse_args / flat_info, whatever the rule's list conventions."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import TensorSpec
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])


def forward_sweep(g: Graph) -> dict[Tensor, DistAttr]:
    """One forward pass of the rules in topological order (not completion: no reverse, no
    conflicts); sources take their annotation or replicated."""
    attrs: dict[Tensor, DistAttr] = {}
    for t in g.tensors:
        if t.producer is None:
            attrs[t] = t.attr if t.attr is not None else DistAttr.replicated(MESH, t.ndim)

    def spec(t: Tensor) -> TensorSpec:
        return TensorSpec._make(t.shape, attrs[t])

    for op in g.ops:
        info = op.rule.infer_forward(*op.forward_args(spec))
        _, outs = op.flat_info(info)
        for t, a in zip(op.outputs, outs, strict=True):
            attrs[t] = a
        if op.rule.has_reverse:
            rev = op.rule.infer_reverse(*op.reverse_args(spec))
            ins, outs2 = op.flat_info(rev)
            assert len(ins) == len(op.inputs) and len(outs2) == len(op.outputs)
    return attrs


def test_gpt_layer_gets_megatron_heads_from_a_forward_sweep() -> None:
    g = examples.gpt_decoder(2, MESH, batch=4, seq=8, hidden=32, heads=4, ffn=64, vocab=64)
    a = forward_sweep(g)
    assert len(a) == g.num_tensors
    for i in range(2):
        assert a[g.tensor(f"layers.{i}.attn.softmax")].dims_mapping == (0, 1, -1, -1)  # heads on mp
        assert a[g.tensor(f"layers.{i}.fc2.matmul")].partial == {1: "sum"}  # row-parallel
        assert a[g.tensor(f"layers.{i}.out.matmul")].partial == {1: "sum"}
        assert a[g.tensor(f"layers.{i}.gelu")].dims_mapping == (0, -1, 1)


def test_mlp_forward_sweep() -> None:
    g = examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16)
    a = forward_sweep(g)
    assert a[g.tensor("fc2.matmul")].dims_mapping == (0, -1, -1)
    assert a[g.tensor("fc2.matmul")].partial == {1: "sum"}


@pytest.mark.parametrize("op", ["split", "unbind", "concat", "default_data_parallel", "replicated"])
def test_list_conventions_line_up(op: str) -> None:
    if op not in sr.list_rules():
        pytest.skip(f"{op} is not registered")
    with Graph() as g:
        x = g.input("x", [8, 4])
        y = g.input("y", [8, 4])
        if op == "split":
            node = ops.call("split", x, [4, 4], 0)
        elif op == "unbind":
            node = ops.call("unbind", x, 1)
        elif op == "concat":
            node = ops.call("concat", [x, y], 1)
        else:
            node = ops.call(op, [x, y], outs=[[8, 4], [8]])
    attrs = {x: DistAttr(MESH, [0, -1]), y: DistAttr(MESH, [0, -1])}
    for t in node.outputs:
        attrs[t] = DistAttr.replicated(MESH, t.ndim)

    def spec(t: Tensor) -> TensorSpec:
        return TensorSpec._make(t.shape, attrs[t])

    ins, outs = node.flat_info(node.rule.infer_forward(*node.forward_args(spec)))
    assert len(ins) == len(node.inputs) and len(outs) == len(node.outputs)
    if node.rule.has_reverse:
        ins, outs = node.flat_info(node.rule.infer_reverse(*node.reverse_args(spec)))
        assert len(ins) == len(node.inputs) and len(outs) == len(node.outputs)
