"""The language of plan keys (issue 23, item 9): a key that is a name of the graph (or a dotted
tail of one) names exactly that; any other key is a glob; brackets escape a glob's wildcards;
and every name the "did you mean" hint offers is a key that matches."""

from __future__ import annotations

import ast
import glob
import re
from collections.abc import Callable
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import examples, plan
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def _bracketed() -> Graph:
    """Tensors whose names hold brackets beside ones a glob of the same text would match, and
    modules with brackets (``h[1]`` owns ``h[1].weight``; ``h1`` owns ``h1.weight``)."""
    with Graph("brackets") as g:
        for name in ("x0", "x[0]", "y0"):
            ops.relu(g.input(name, [4, 8]))
        x = g.input("tokens", [4, 8])
        for m in ("h[1]", "h1", "blocks.h[1]"):
            x = ops.matmul(x, g.param(f"{m}.weight", [8, 8]))
    return g


def _annotated(key: str, style: Any) -> tuple[str, ...]:
    return plan.apply(_bracketed(), MESH, {key: style}).annotated[key]


def test_a_key_that_is_a_tensor_name_names_that_tensor_only() -> None:
    assert _annotated("x[0]", plan.DataParallel()) == ("x[0]",)  # not x0
    assert _annotated("x0", plan.DataParallel()) == ("x0",)


def test_a_key_that_is_a_module_name_or_its_tail_names_those_modules() -> None:
    assert set(_annotated("h[1]", plan.ColwiseParallel())) == {"h[1].weight",
                                                               "blocks.h[1].weight"}
    assert _annotated("blocks.h[1]", plan.ColwiseParallel()) == ("blocks.h[1].weight",)
    assert _annotated("h1", plan.ColwiseParallel()) == ("h1.weight",)


def test_any_other_key_is_a_glob() -> None:
    assert _annotated("y[0]", plan.DataParallel()) == ("y0",)  # no tensor y[0]: a glob
    assert _annotated("?0", plan.DataParallel()) == ("x0", "y0")
    assert set(_annotated("h*", plan.ColwiseParallel())) == {
        "h[1].weight", "h1.weight", "blocks.h[1].weight"}


def test_brackets_escape_a_globs_wildcards() -> None:
    assert _annotated("x[[]0]*", plan.DataParallel()) == ("x[0]",)
    assert set(_annotated("h[[]?]", plan.ColwiseParallel())) == {"h[1].weight",
                                                                 "blocks.h[1].weight"}
    assert set(_annotated(glob.escape("h[1]") + "*", plan.ColwiseParallel())) == {
        "h[1].weight", "blocks.h[1].weight"}
    assert plan.matches("blocks.h[1].weight", "h[[]1].*")
    assert not plan.matches("blocks.h1.weight", "h[[]1].*")


def _suggestions(message: str) -> list[str]:
    found = re.search(r"did you mean ((?:'[^']*'(?:, )?)+)\?", message)
    return list(ast.literal_eval(f"[{found.group(1)}]")) if found else []


def _mlp() -> Graph:
    return examples.mlp(MESH, batch=4, seq=8, hidden=16, ffn=32, annotate=False)


STYLES: dict[str, Callable[[], Any]] = {
    "ColwiseParallel": plan.ColwiseParallel,
    "DataParallel": plan.DataParallel,
    "Spec": lambda: plan.Spec((None, None)),
    "Spatial": lambda: plan.Spatial(dims={"C": "mp"}, layout="NC"),
}
def _llama() -> Graph:
    return examples.llama_decoder(2, MESH, batch=4, seq=8, hidden=32, heads=4, kv_heads=2,
                                  ffn=64, vocab=64, annotate=False)


TYPOS = {_bracketed: ["x[1]", "x(0)", "h[2]", "h[1", "blocks.h[2]", "blocks.h[1].weigth", "tokenz",
                      "blocks.h[[]1]*.weigth", "*.h[[]1].wieght"],
         _mlp: ["fc3", "fc1.weigth", "fc1.ad", "xx", "fc*.wieght", "*.bais"],
         _llama: ["layers.*.qq", "*.dwn", "layer.*.q.weight", "layers.?.gat", "*.attn_nrm"]}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_every_suggested_key_matches(style: str) -> None:
    """The hint names only what the style reaches (a tensor style is never offered a module),
    and each name it offers, written as a key, matches."""
    offered = []
    for graph, typos in TYPOS.items():
        for typo in typos:
            with pytest.raises(plan.UnmatchedPatternError) as e:
                plan.apply(graph(), MESH, {typo: STYLES[style]()})
            offered += [(graph, typo, key) for key in _suggestions(str(e.value))]
    assert len(offered) >= 5
    for graph, typo, key in offered:
        try:
            assert plan.apply(graph(), MESH, {key: STYLES[style]()}).annotated[key]
        except plan.UnmatchedPatternError as e:
            pytest.fail(f"{typo!r} was offered {key!r}, which matches nothing: {e}")
        except plan.PlanTargetError:
            pass  # it matched, and the style does not fit what it matched (a 3-d tensor)


def test_the_hint_of_a_tensor_style_offers_tensors_only() -> None:
    with pytest.raises(plan.UnmatchedPatternError,
                       match=r"matches no tensor of graph 'mlp'; did you mean 'fc1\.weight'"):
        plan.apply(_mlp(), MESH, {"fc1.weigth": plan.Spec((None, None))})
    with pytest.raises(plan.UnmatchedPatternError) as e:
        plan.apply(_mlp(), MESH, {"fc3": plan.Spec((None, None))})
    assert _suggestions(str(e.value)) == []  # the modules fc1 and fc2 are no tensors


@pytest.mark.parametrize(("typo", "offered"), [
    ("layers.*.qq", "layers.*.q"), ("layer.*.q", "layers.*.q"), ("*.dwn", "*.down"),
    ("*.attn_nrm", "*.attn_norm"), ("layers.*.mlp.q", "layers.*.q"),
])
def test_a_misspelt_glob_is_offered_the_closest_globs(typo: str, offered: str) -> None:
    # a glob was compared with whole names only ('layers.0.q' is far from 'layers.*.qq'), so
    # no wildcard key got a hint; it is now compared with the names' generic forms
    with pytest.raises(plan.UnmatchedPatternError) as e:
        plan.apply(_llama(), MESH, {typo: plan.ColwiseParallel()})
    assert _suggestions(str(e.value))[0] == offered
