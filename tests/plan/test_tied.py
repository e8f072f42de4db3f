"""A weight tied between the token embedding and the LM head (``tie_word_embeddings=True``, the
default of many models) takes VocabParallel (issue 26): torch.export reads it under one name
(``lm_head.weight``) and leaves the other unread, and the plan refused it twice, with
contradictory messages ("no matmul or embedding uses model.embed_tokens.weight"; "the ops using
lm_head.weight disagree"). Now each module's entry reaches the weight its ops read, and both uses
agree on one annotation: the vocabulary rows split (the lookup a pending sum, the logits split on
the vocabulary). tests/importers/test_torch_models.py runs it on 4 MPI ranks against torch."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

from hf_models import MESH, MODELS, exported, tie  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.completion.explain import explain  # noqa: E402
from spmdrules.execution.adjoint import gradient_program  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.graph.graph import Graph  # noqa: E402


def _graph(kind: str, *, tied: bool) -> tuple[Any, Graph]:
    module = MODELS[kind][0](1)
    return (tie(module) if tied else module), exported(kind, 2, layers=1, tied=tied).graph


def _bytes(g: Graph) -> tuple[int, int]:
    prog = lower(complete(g))
    return prog.predicted_bytes, gradient_program(prog, ["logits"]).predicted_bytes


@pytest.mark.parametrize(("kind", "embedding"), [("llama", "model.embed_tokens"),
                                                 ("gpt2", "transformer.wte")])
def test_a_tied_embedding_and_lm_head_take_one_vocab_split(kind: str, embedding: str) -> None:
    megatron = MODELS[kind][1]
    _, g = _graph(kind, tied=True)
    [tied] = [t for t in g.params if len(t.consumers) == 2]
    assert tied.name == "lm_head.weight" and not g.tensor(f"{embedding}.weight").consumers
    done = plan.apply(g, MESH, megatron)
    emb_key = next(k for k, s in megatron.items() if isinstance(s, plan.VocabParallel))
    assert done.annotated[emb_key] == done.annotated["lm_head"] == ("lm_head.weight",)
    assert tied.annotation is not None and tied.annotation.spec_str() == "('mp', None)"
    r = complete(g)
    text = explain(r, tied)
    assert (f"by plan entry {emb_key!r}: VocabParallel(dim='mp') and plan entry 'lm_head': "
            "ColwiseParallel(dim='mp')") in text
    [lookup] = [op for op in tied.consumers if op.type == "embedding"]
    # the lookup of split rows is a pending sum, reduced once
    [edge] = r.reshards_of(lookup.outputs[0])
    assert edge.src.partial and [s.kind for s in edge.plan().steps] == ["all_reduce"]
    assert r.attr("logits").dims_mapping[-1] == 1  # the logits split on the vocabulary
    # the same bytes as the untied model, forward and forward + reverse (both uses' gradients
    # are split alike, so their sum is local)
    _, untied = _graph(kind, tied=False)
    plan.apply(untied, MESH, megatron)
    tied_bytes = _bytes(g)
    assert tied_bytes == _bytes(untied) and min(tied_bytes) > 0


@pytest.mark.parametrize("entries", [{"lm_head": plan.VocabParallel()},
                                     {"embed_tokens": plan.VocabParallel()}])
def test_either_module_of_the_tie_takes_vocab_parallel_alone(entries: dict[str, Any]) -> None:
    _, g = _graph("llama", tied=True)
    plan.apply(g, MESH, entries)
    assert g.tensor("lm_head.weight").annotation.spec_str() == "('mp', None)"  # type: ignore[union-attr]


def test_the_hf_plan_of_a_tied_model_agrees_on_the_vocab_split() -> None:
    module, g = _graph("llama", tied=True)
    plan.apply(g, MESH, plan.from_hf(module, data="dp"))
    ann = g.tensor("lm_head.weight").annotation
    assert ann is not None and ann.spec_str() == "('mp', None)"
    assert "'model.embed_tokens': 'embedding_rowwise'" in ann.source
    assert "'lm_head': 'colwise_gather_output'" in ann.source


def test_a_tie_asked_two_different_splits_is_one_conflict_naming_both_entries() -> None:
    # Colwise on an embedding splits its embedding dim; on the LM head its vocabulary
    _, g = _graph("llama", tied=True)
    with pytest.raises(plan.PlanConflictError,
                       match=r"tensor 'lm_head.weight': plan entry 'embed_tokens': "
                             r"ColwiseParallel\(dim='mp'\) asks \(None, 'mp'\) but plan entry "
                             r"'lm_head': ColwiseParallel\(dim='mp'\) asks \('mp', None\)"):
        plan.apply(g, MESH, {"embed_tokens": plan.ColwiseParallel(),
                             "lm_head": plan.ColwiseParallel()})
    assert g.tensor("lm_head.weight").annotation is None  # the graph is left as it was
