"""``from_hf(model_or_config)``: the tensor-parallel plan a Hugging Face model already carries,
as a plan for ``plan.apply``.

transformers (5.24) writes its plans as ``{module or parameter pattern: style name}``: a config's
``base_model_tp_plan`` (keys relative to the base model, ``layers.*.self_attn.q_proj``), the
model class's own ``_tp_plan`` (``lm_head``) and the default transformers adds (the token
embedding vocab-parallel); a model's ``tp_plan`` is all three, with the base model's prefix
(``model.layers.*.self_attn.q_proj``). Given a model, ``from_hf`` reads that resolved plan;
given a config, its ``base_model_tp_plan`` alone. Each key is kept as our key: HF's ``*`` stands
for a layer's index, ours for any run of characters, and on a model's own names the two match
the same modules.

Each style name becomes ours on mesh dim ``dim`` with the same semantics (``STYLES``): the
parameters are split as transformers splits them, and the layouts of the activations between
them, which HF's ``input_layouts``/``output_layouts`` fix, are left to completion, as for every
style here. ``colwise_gather_output`` therefore splits the weight as ``colwise`` does: whether the
output is gathered at once or where the next op needs it is completion's choice. The styles that
only hook activations or gradients (the sums that completion and reverse mode derive) annotate
nothing and are listed in ``HFPlan.derived``; every other style is refused (``HFPlanError``,
naming the style, the pattern and what to write instead).

``experts="ep"`` plans the experts by expert, as transformers does when ``ep_size > 1``: the
config's ``base_model_ep_plan`` replaces the tensor-parallel entries on the expert modules.
``data="dp"`` adds data parallelism on that mesh dim: each input of the first stage of
``base_model_pp_plan`` (``input_ids``) split on its batch dim.

Every entry is a ``Translated`` style whose origin ``explain`` prints:
``by plan entry 'model.layers.*.self_attn.q_proj': ColwiseParallel(dim='mp') (from
base_model_tp_plan: 'layers.*.self_attn.q_proj': 'colwise')``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from spmdrules.plan.errors import PlanError
from spmdrules.plan.styles import (
    ColwiseParallel,
    DataParallel,
    MeshDim,
    Replicated,
    RowwiseParallel,
    SequenceParallel,
    Spec,
    Style,
    Translated,
    VocabParallel,
)


class HFPlanError(PlanError):
    """A Hugging Face plan entry that has no style of the same meaning here, or a model or config
    that carries no plan."""


def _expert_dim(dim: MeshDim, ndim: int) -> Style:
    """``grouped_gemm``: an experts' parameter split by expert (its dim 0)."""
    return Spec((dim, *[None] * (ndim - 1)))


#: HF style name -> our style on a mesh dim (and the parameter's ndim, where it matters)
STYLES: dict[str, Callable[[MeshDim, int], Style]] = {
    "colwise": lambda d, _: ColwiseParallel(d),
    "colwise_rep": lambda d, _: ColwiseParallel(d),
    "colwise_gather_output": lambda d, _: ColwiseParallel(d),
    "rowwise": lambda d, _: RowwiseParallel(d),
    "rowwise_rep": lambda d, _: RowwiseParallel(d),
    "rowwise_split_input": lambda d, _: RowwiseParallel(d),
    "embedding_rowwise": lambda d, _: VocabParallel(d),
    "embedding_colwise": lambda d, _: ColwiseParallel(d),
    # gate | up packed along the output features, each half split (_StridedShard, factor 2)
    "packed_colwise": lambda d, _: ColwiseParallel(d, chunks=2),
    "sequence_parallel": lambda d, _: SequenceParallel(d),
    "replicate": lambda d, _: Replicated(),
    "replicated_with_grad_allreduce": lambda d, _: Replicated(),  # the gradient's sum: reverse mode
    "grouped_gemm": _expert_dim,
}
#: HF styles that only hook activations or gradients: what they reduce or move, completion and
#: reverse mode derive from the parameters' splits, so they annotate nothing
DERIVED: dict[str, str] = {
    "all_reduce": "the sum of a module's partial output",
    "moe_tp_experts": "the sum of the experts' partial outputs",
    "ep_dispatch_experts": "the tokens' dispatch to the experts' processes and the combine",
    "moe_identity_expert": "the division that cancels the experts' sum for identity experts",
    "mla_kv_a_proj": "the sum of the rotary half's gradient",
    "local_params": "running the module's kernel on local blocks",
}
#: refused, with what to write instead
REFUSED: dict[str, str] = {
    "packed_rowwise": "it splits input features packed as gate | up by halves (_StridedShard); "
                      "spmdrules stores interleaved only output features "
                      "(ColwiseParallel(chunks=...)): use RowwiseParallel() (one contiguous split, "
                      "the same values) or a raw Spec",
}
_PACKED_2D = "on a linear's [out, in] weight"


class HFPlan(dict[str, Translated]):
    """The translated plan (``{our key: Translated style}``, what ``plan.apply`` takes), with
    ``derived`` (HF entries that annotate nothing: key -> what completion derives instead) and
    ``unmatched`` (entries naming nothing in the model, which transformers skips with a warning:
    key -> style name)."""

    def __init__(self) -> None:
        super().__init__()
        self.derived: dict[str, str] = {}
        self.unmatched: dict[str, str] = {}


def _layerless(name: str) -> str:
    """transformers' ``replace_layer_number_by_wildcard``: each dotted number a ``*``."""
    return re.sub(r"\.\d+(\.|$)", lambda m: ".*" + m.group(1), name)


def _read(obj: Any) -> tuple[Any, Any]:
    """(model or None, config) of a PreTrainedModel or a PretrainedConfig (duck-typed: the plan
    layer does not import transformers)."""
    if hasattr(obj, "tp_plan") and hasattr(obj, "config") and hasattr(obj, "named_parameters"):
        return obj, obj.config
    if hasattr(obj, "base_model_tp_plan"):
        return None, obj
    raise HFPlanError(f"plan.from_hf: {type(obj).__name__} is neither a Hugging Face model "
                      "(PreTrainedModel) nor its config (PretrainedConfig); pass model or "
                      "model.config")


def _origins(model: Any, config: Any, experts: str) -> dict[str, tuple[str, str]]:
    """key -> (style name, where the entry comes from), in transformers' order."""
    cls = type(model).__name__ if model is not None else type(config).__name__
    base_tp = dict(config.base_model_tp_plan or {})
    base_ep = dict(getattr(config, "base_model_ep_plan", None) or {})
    if model is None:
        tp = {k: (s, f"base_model_tp_plan: {k!r}: {s!r}") for k, s in base_tp.items()}
        ep = {k: (s, f"base_model_ep_plan: {k!r}: {s!r}") for k, s in base_ep.items()}
    else:
        prefix = "" if model.base_model is model else f"{model.base_model_prefix}."
        own = dict(getattr(type(model), "_tp_plan", None) or {})

        def origin(key: str, style: str, base: Mapping[str, str], what: str) -> str:
            rel = key[len(prefix):] if key.startswith(prefix) else key
            if rel in base and base[rel] == style:
                return f"{what}: {rel!r}: {style!r}"
            if own.get(key) == style:
                return f"{cls}._tp_plan: {key!r}: {style!r}"
            return f"{cls}.{what.split('_', 2)[2]}: {key!r}: {style!r}"

        tp = {k: (s, origin(k, s, base_tp, "base_model_tp_plan")) for k, s in model.tp_plan.items()}
        ep = {k: (s, origin(k, s, base_ep, "base_model_ep_plan"))
              for k, s in (getattr(model, "ep_plan", None) or {}).items()}
    if experts == "tp":
        return tp
    if not ep:
        raise HFPlanError(f"plan.from_hf(experts='ep'): {cls} carries no base_model_ep_plan; use "
                          "experts='tp'")
    # transformers' precedence: an expert module keeps no tensor-parallel rule, nor do its children
    is_expert = re.compile(rf"(?:{'|'.join(map(re.escape, ep))})(?:\..+)?").fullmatch
    return {**{k: v for k, v in tp.items() if not is_expert(k)}, **ep}


def _first_inputs(config: Any, model: Any) -> tuple[str, list[str]]:
    pp = dict(getattr(config, "base_model_pp_plan", None) or {})
    if not pp:
        what = type(model if model is not None else config).__name__
        raise HFPlanError(f"plan.from_hf(data=...): {what} carries no base_model_pp_plan to name "
                          "the model's inputs; add plan.DataParallel() on your input by hand")
    stage, (inputs, outputs) = next(iter(pp.items()))
    return f"base_model_pp_plan: {stage!r}: ({list(inputs)!r}, {list(outputs)!r})", list(inputs)


def from_hf(model_or_config: Any, *, dim: MeshDim = "mp", data: MeshDim | None = None,
            experts: Literal["tp", "ep"] = "tp") -> HFPlan:
    """Our plan for the tensor-parallel plan a Hugging Face model or config carries (module docs).

    >>> import transformers
    >>> from spmdrules import plan
    >>> p = plan.from_hf(transformers.LlamaConfig(), data="dp")
    >>> p["layers.*.self_attn.q_proj"].style, p["input_ids"].style
    (ColwiseParallel(dim='mp'), DataParallel(dim='dp', batch_dim=0))
    >>> p["layers.*.self_attn.q_proj"].origin
    "from base_model_tp_plan: 'layers.*.self_attn.q_proj': 'colwise'"
    """
    if experts not in ("tp", "ep"):
        raise HFPlanError(f"plan.from_hf: experts={experts!r}; give 'tp' (each expert split as "
                          "its tp_plan says) or 'ep' (the experts split by expert)")
    model, config = _read(model_or_config)
    entries = _origins(model, config, experts)
    if not entries:
        raise HFPlanError(f"plan.from_hf: {type(config).__name__} carries no base_model_tp_plan "
                          "(transformers has none for this architecture); write the plan by hand "
                          "with plan.ColwiseParallel(), plan.RowwiseParallel(), ...")
    names, params = _model_names(model)
    out = HFPlan()
    for key, (style, origin) in entries.items():
        if model is not None and key not in names:
            out.unmatched[key] = style
            continue
        if style in DERIVED:
            out.derived[key] = DERIVED[style]
            continue
        ndim = params.get(key, params.get(f"{key}.weight", 3 if style == "grouped_gemm" else 2))
        _check(key, style, origin, ndim, model is not None)
        out[key] = Translated(STYLES[style](dim, ndim), f"from {origin}")
    if data is not None:
        origin, inputs = _first_inputs(config, model)
        for name in inputs:
            out[name] = Translated(DataParallel(dim=data), f"from {origin}")
    return out


def _model_names(model: Any) -> tuple[set[str], dict[str, int]]:
    """A model's modules and parameters with their layer numbers as ``*`` (as transformers matches
    plan keys), and each such parameter name's ndim."""
    if model is None:
        return set(), {}
    params = {_layerless(n): p.ndim for n, p in model.named_parameters()}
    return {_layerless(n) for n, _ in model.named_modules()} | set(params), params


def _check(key: str, style: str, origin: str, ndim: int, known: bool) -> None:
    entry = f"{origin.split(': ', 1)[0]} entry {key!r}: {style!r}"
    if style in REFUSED:
        raise HFPlanError(f"{entry} is refused: {REFUSED[style]}")
    if style not in STYLES:
        raise HFPlanError(
            f"{entry}: no such transformers style here; the known ones are "
            f"{sorted([*STYLES, *DERIVED, *REFUSED])}; give this key a style of "
            "spmdrules.plan by hand")
    if style == "packed_colwise" and known and ndim != 2:
        raise HFPlanError(
            f"{entry} splits each half of a packed gate | up {_PACKED_2D}, but this parameter "
            f"has {ndim} dims (experts' weights, read by index): split the experts by expert "
            "instead, plan.from_hf(..., experts='ep') (their base_model_ep_plan)")
