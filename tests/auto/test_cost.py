"""Compute priced by flops (issue 27): a convolution, whose rule keeps its input channels and
window whole, is priced as the contraction it is, from its weight's shape, whatever its
strides and groups; a norm's scale and a softmax's axis stay at the elementwise rate."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.auto import cost as cm

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def test_a_convolution_is_priced_by_its_flops() -> None:
    g = examples.resnet_block(MESH, batch=2, size=8)
    conv = g.ops[0]
    _, w = conv.inputs
    (out,) = conv.outputs
    assert len(w.shape) == 4 and w.role == "param"
    c_in, kh, kw = w.shape[1:]
    assert cm.work(conv) == cm.Work(2.0 * out.numel * c_in * kh * kw, True)
    norm = g.ops[1]  # batch norm: its scale and shift are whole on their one dim
    assert not cm.work(norm).contraction


def test_a_strided_grouped_convolution_counts_its_groups_and_strides() -> None:
    torch = pytest.importorskip("torch")
    from spmdrules.importers import torch as torch_import

    module = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
    g = torch_import.export(module, (torch.randn(2, 4, 16, 16),)).graph
    (conv,) = [op for op in g.ops if any(t.role == "param" and len(t.shape) == 4
                                         for t in op.inputs)]
    # out [2, 8, 8, 8]; each element sums C_in / groups = 2 channels over a 3 x 3 window
    assert cm.work(conv) == cm.Work(2.0 * (2 * 8 * 8 * 8) * 2 * 3 * 3, True)


def test_softmax_and_norms_stay_elementwise() -> None:
    g = examples.llama_decoder(1, MESH, annotate=False, batch=2, seq=8, hidden=16, heads=2,
                               kv_heads=1, ffn=32, vocab=32)
    named = [op for op in g.ops if op.name.endswith(("softmax", "_norm"))]
    assert len(named) == 3  # the softmax and the two RMS norms (their scale a parameter)
    assert not any(cm.work(op).contraction for op in named)


def test_a_softmax_is_one_elementwise_pass_over_its_operand_and_result() -> None:
    # measured (docs/auto.md, "Limits"): a reduction along a whole axis costs one elementwise
    # pass; softmax is priced so, per element of its operand and its result, split or not
    g = examples.llama_decoder(1, MESH, annotate=False, batch=2, seq=8, hidden=16, heads=2,
                               kv_heads=1, ffn=32, vocab=32)
    (op,) = [op for op in g.ops if op.type == "softmax"]
    (x,), (out,) = op.inputs, op.outputs
    assert cm.work(op) == cm.Work(float(x.numel + out.numel), False)
    opts = cm.Options()
    whole = cm.TRAINING_FACTOR * (x.numel + out.numel) / opts.rate.elementwise
    assert cm.compute_time(op, 1, opts) == pytest.approx(whole)
    assert cm.compute_time(op, 4, opts) == pytest.approx(whole / 4)
