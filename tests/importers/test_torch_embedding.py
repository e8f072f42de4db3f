"""torch's ``embedding`` with ``padding_idx`` (Gemma's, Phi-3's, BERT's and BART's default when
``pad_token_id`` is set; issue 26): the forward reads the padding row as it is, and only the
gradient differs, the padding row getting none. The op carries it as ``no_grad_idx``, which only
the VJP reads, so a vocab-parallel table keeps its split."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

import spmdrules as sr  # noqa: E402
from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.adjoint import gradient_program  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.simulated import run_simulated  # noqa: E402
from spmdrules.graph import ops  # noqa: E402
from spmdrules.graph.errors import ShapeError  # noqa: E402
from spmdrules.graph.graph import Graph  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


class Lookup(torch.nn.Module):
    def __init__(self, padding_idx: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(16, 8, padding_idx=padding_idx)
        with torch.no_grad():  # a padding row that is not zero: the forward still reads it
            self.emb.weight[self.emb.padding_idx] = torch.arange(8.0) + 1

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids) * 2.0


@pytest.mark.parametrize("padding_idx", [3, -2])
@pytest.mark.parametrize("vocab_parallel", [False, True])
def test_padding_idx_reads_its_row_and_its_gradient_is_zero_as_torch(
        padding_idx: int, vocab_parallel: bool) -> None:
    module = Lookup(padding_idx)
    pad = module.emb.padding_idx
    ids = torch.tensor([[pad, 1, 5, pad], [15, pad, 9, 1]])
    imp = torch_import.export(module, (ids,))
    (op,) = [o for o in imp.graph.ops if o.type == "embedding"]
    assert op.attr("no_grad_idx") == pad and op.attr("padding_idx") == -1
    styles: dict[str, object] = {imp.inputs[0]: plan.DataParallel(dim="dp")}
    if vocab_parallel:
        styles["emb"] = plan.VocabParallel()
    plan.apply(imp.graph, MESH, styles)
    result = complete(imp.graph)
    if vocab_parallel:  # the table keeps its vocabulary split on mp
        assert result.attr("emb.weight").dims_mapping[0] == 1
    out = imp.outputs[0]
    gp = gradient_program(lower(result), [out])
    feeds = imp.feeds(ids)
    seed = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    feeds[gp.seeds[out]] = seed
    run = run_simulated(gp, feeds)

    want = module(ids)
    want.backward(torch.from_numpy(seed))
    np.testing.assert_allclose(run.fetch(out), want.detach().numpy(), rtol=1e-6)
    grad = run.fetch(gp.grads["emb.weight"])
    np.testing.assert_allclose(grad, module.emb.weight.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert not grad[pad].any() and grad[1].any()


def test_a_no_grad_row_outside_the_table_is_refused_naming_the_table() -> None:
    g = Graph("g")
    with g:
        ids, w = g.input("ids", [2, 3], "int64"), g.param("w", [16, 8], "float32")
        with pytest.raises(ShapeError, match=r"weight.*16 rows.*no_grad_idx is 16.*0\.\.15"):
            ops.embedding(ids, w, no_grad_idx=16)
