"""``apply(graph, mesh, plan)``: annotate a graph by name patterns, one style per pattern.

A key names tensors and modules of the graph (``spmdrules.plan.patterns``): a key that is a
name of the graph, or a dotted tail of one, names exactly that (``h[1]`` is the tensor ``h[1]``);
any other key is an ``fnmatch`` glob (``*`` crosses dots) that matches a whole name or a dotted
tail, as DTensor's plans are written relative to the module they are given:
``"layers.*.mlp.down_proj"`` matches ``model.layers.0.mlp.down_proj``. The names are the graph's
tensors and its *modules*: every dotted prefix of a parameter's name
(``model.layers.0.self_attn.q_proj`` for ``...q_proj.weight``).

What a style reaches: ColwiseParallel, RowwiseParallel and VocabParallel act on modules (their
``weight`` and ``bias``); Spatial and raw specs on tensors; DataParallel, SequenceParallel and
Replicated on the tensors a pattern matches, or, when it matches no tensor, on its modules. A
``Translated`` style (``plan.from_hf``) acts as its style, and its origin joins the entry's name.

Every annotation records its plan entry (``Annotation.source``), which ``explain`` prints. A
pattern that matches nothing, a style that does not fit what it matched, and two entries that
ask different layouts of one tensor are typed errors; nothing is skipped silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError, did_you_mean
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import Annotation
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.storage import Interleaved
from spmdrules.plan.chunks import TRANSPOSES, WEIGHT_USES, ChunkRewrite, plan_rewrite
from spmdrules.plan.errors import (
    PlanConflictError,
    PlanError,
    PlanTargetError,
    UnmatchedPatternError,
)
from spmdrules.plan.patterns import GraphNames, candidates
from spmdrules.plan.styles import (
    STYLES,
    WEIGHT_STYLES,
    ColwiseParallel,
    DataParallel,
    Replicated,
    SequenceParallel,
    Spatial,
    Spec,
    Style,
    Translated,
    VocabParallel,
    describe,
)


@dataclass(frozen=True)
class AppliedPlan:
    """What ``apply`` did: for each plan entry, the tensors it annotated, in graph order."""

    annotated: dict[str, tuple[str, ...]]

    def tensors(self) -> tuple[str, ...]:
        return tuple(t for names in self.annotated.values() for t in names)


def _modules(graph: Graph) -> dict[str, list[Tensor]]:
    """Module name -> the parameters under it (direct and nested), in graph order."""
    out: dict[str, list[Tensor]] = {}
    for t in graph.params:
        parts = t.name.split(".")
        for k in range(1, len(parts)):
            out.setdefault(".".join(parts[:k]), []).append(t)
    return out


def _style_of(pattern: Any, value: Any) -> tuple[Style, str]:
    """The entry's style and how ``explain`` names the entry."""
    if not isinstance(pattern, str) or not pattern:
        raise PlanError(f"plan: pattern {pattern!r} is not a non-empty str; write a glob over the "
                        "graph's names, e.g. '*.q_proj'")
    if isinstance(value, Translated):
        style = _style_of(pattern, value.style)[0]
        return style, describe(pattern, style, value.origin)
    if isinstance(value, STYLES):
        return value, describe(pattern, value)
    if isinstance(value, DistAttr | list | tuple):
        return Spec(value), describe(pattern, Spec(value))
    if isinstance(value, type) and issubclass(value, STYLES):
        raise PlanError(f"plan entry {pattern!r}: {value.__name__} is a class; write "
                        f"{value.__name__}() (an instance)")
    raise PlanError(
        f"plan entry {pattern!r}: {value!r} is not a style; use ColwiseParallel(), "
        "RowwiseParallel(), VocabParallel(), SequenceParallel(), DataParallel(dim='dp'), "
        "Replicated(), Spatial(dims={'H': 'mp'}) or a raw spec (placements, dims_mapping, "
        "PartitionSpec)")


def apply(graph: Graph, mesh: ProcessMesh, plan: Mapping[str, Any], *,
          priority: int = 0) -> AppliedPlan:
    """Annotate ``graph`` on ``mesh`` by ``plan`` ({pattern: style}); see the module docs.

    >>> import spmdrules as sr
    >>> from spmdrules import examples, plan
    >>> mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    >>> g = examples.mlp(mesh, batch=4, seq=8, hidden=16, ffn=32, annotate=False)
    >>> done = plan.apply(g, mesh, {"x": plan.DataParallel(), "fc1": plan.ColwiseParallel(),
    ...                             "fc2": plan.RowwiseParallel()})
    >>> done.annotated["fc1"], g.tensor("fc2.weight").annotation
    (('fc1.bias', 'fc1.weight'), Annotation(('mp', None), priority=0))
    """
    if not isinstance(graph, Graph):
        raise PlanError(f"plan.apply: the first argument must be a Graph, got "
                        f"{type(graph).__name__}")
    if not isinstance(mesh, ProcessMesh):
        raise PlanError(f"plan.apply: mesh must be a ProcessMesh, got {type(mesh).__name__}")
    if not isinstance(plan, Mapping):
        raise PlanError(f"plan.apply: plan must be a dict {{pattern: style}}, got {plan!r}")
    modules = _modules(graph)
    tensors = {t.name: t for t in graph.tensors}
    names = GraphNames(tensors, modules)
    before: dict[str, tuple[Annotation | None, DistAttr | None]] = {}
    try:
        return _apply(graph, mesh, plan, priority, modules, tensors, names, before)
    except BaseException:  # a failing plan leaves the graph as it was
        for name, (ann, attr) in before.items():
            tensors[name].annotation, tensors[name].attr = ann, attr
        raise


def _apply(graph: Graph, mesh: ProcessMesh, plan: Mapping[str, Any], priority: int,
           modules: Mapping[str, list[Tensor]], tensors: Mapping[str, Tensor],
           names: GraphNames, before: dict[str, tuple[Annotation | None, DistAttr | None]]
           ) -> AppliedPlan:
    """Annotate the tensors each entry reaches, recording in ``before`` what each held first."""
    asked: dict[str, tuple[Annotation, str]] = {}
    done: dict[str, tuple[str, ...]] = {}
    rewrites: dict[str, tuple[Interleaved | None, str, ChunkRewrite | None]] = {}
    for pattern, value in plan.items():
        style, source = _style_of(pattern, value)
        hit = []
        for t, spec in _entry(graph, mesh, pattern, style, source, modules, tensors, names,
                              rewrites):
            before.setdefault(t.name, (t.annotation, t.attr))
            earlier = asked.get(t.name)
            # entries that agree on a tensor (a tied weight's two modules) are both its source
            both = (source if earlier is None else earlier[1] if source in earlier[1]
                    else f"{earlier[1]} and {source}")
            ann = _annotate(t, mesh, spec, style, priority, both)
            if earlier is not None and earlier[0] != ann:
                raise PlanConflictError(
                    f"tensor {t.name!r}: {earlier[1]} asks {earlier[0].spec_str()} but {source} "
                    f"asks {ann.spec_str()}; narrow one of the two patterns")
            asked[t.name] = (ann, both)
            hit.append(t.name)
        done[pattern] = tuple(sorted(set(hit), key=lambda n: tensors[n].order))
    for name, (ann, _) in asked.items():
        old = before[name][0]
        if old is not None and old != ann and old.source != ann.source:
            raise PlanConflictError(
                f"tensor {name!r} is already annotated {old.spec_str()}"
                + (f" by {old.source}" if old.source else "")
                + f", but {ann.source} asks {ann.spec_str()}; drop one of them")
    for _, _, rewrite in rewrites.values():  # every entry fits: only now does the graph change
        if rewrite is not None:
            rewrite.apply()
    return AppliedPlan(done)


def _annotate(t: Tensor, mesh: ProcessMesh, spec: Any, style: Style, priority: int,
              source: str) -> Annotation:
    """``shard`` ``t`` as the entry asks; a misfit is a PlanTargetError naming the entry."""
    partial, closed = (style.partial, style.closed) if isinstance(style, Spec) else (None, True)
    try:
        shard(t, mesh, spec, partial=partial, priority=priority, closed=closed, source=source)
    except PlanError:
        raise
    except Exception as e:
        raise PlanTargetError(f"{source} on tensor {t.name!r} {list(t.shape)}: {e}") from e
    assert t.annotation is not None
    return t.annotation


def _entry(graph: Graph, mesh: ProcessMesh, pattern: str, style: Style, source: str,
           modules: Mapping[str, list[Tensor]], tensors: Mapping[str, Tensor],
           names: GraphNames,
           rewrites: dict[str, tuple[Interleaved | None, str, ChunkRewrite | None]]
           ) -> list[tuple[Tensor, Any]]:
    """(tensor, spec) for every tensor the entry annotates; a chunk-aware entry's rewrites,
    checked, go into ``rewrites`` by weight."""
    on_tensors = not isinstance(style, WEIGHT_STYLES)
    on_modules = not isinstance(style, Spec | Spatial)
    hit_t = names.tensors_of(pattern) if on_tensors else []
    hit_m = names.modules_of(pattern) if on_modules and not hit_t else []
    if not hit_t and not hit_m:
        # suggest only what this style reaches, so that a suggested key matches
        pool = [*(tensors if on_tensors else ()), *(modules if on_modules else ())]
        what = " or ".join(w for w, on in (("tensor", on_tensors), ("module", on_modules)) if on)
        hint = did_you_mean(pattern, candidates(pattern, pool), 3)
        raise UnmatchedPatternError(
            f"{source} matches no {what} of graph {graph.name!r}{hint}"
            f" (a key is a name, or a dotted tail of one, or else a glob over the names and "
            f"their dotted tails; {len(modules)} modules, {len(tensors)} tensors)")
    out: list[tuple[Tensor, Any]] = []
    for n in hit_t:
        out.append((tensors[n], _tensor_spec(tensors[n], mesh, style, source)))
    for m in hit_m:
        out.extend(_module_specs(m, modules[m], style, source))
        if isinstance(style, ColwiseParallel):
            _chunked(m, modules[m], style, mesh, source, rewrites)
    return out


def _chunked(module: str, params: Sequence[Tensor], style: ColwiseParallel, mesh: ProcessMesh,
             source: str, rewrites: dict[str, tuple[Interleaved | None, str, ChunkRewrite | None]]
             ) -> None:
    """Check a ColwiseParallel module and keep, by weight, the interleaved storage it asks
    (None without chunks), its entry and its rewrite (``spmdrules.plan.chunks``)."""
    own = {p.name[len(module) + 1:]: p for p in params}
    weight = own["weight"]  # _module_specs made sure it is there
    rewrite, lay = None, None
    if style.chunks is not None:
        kind, out_dim, _ = weight_use(weight, source)
        if kind != "linear":
            raise PlanTargetError(f"{source}: chunks split a linear's output features; "
                                  f"{weight.name!r} is an embedding table")
        try:
            ways = mesh.dim_size(style.dim)
        except SpmdError as e:
            raise PlanTargetError(f"{source}: {e}") from e
        rewrite = plan_rewrite(weight, own.get("bias"), out_dim, style.chunks, ways, source)
        lay = weight.storage if rewrite is None else rewrite.weight_storage
    earlier = rewrites.get(weight.name)
    if earlier is not None and earlier[0] != lay:
        raise PlanConflictError(
            f"module {module!r}: {earlier[1]} and {source} ask different layouts of the output "
            f"features of {weight.name!r} ({earlier[0]} and {lay}: None is one contiguous "
            "split); narrow one of the two patterns")
    rewrites[weight.name] = (lay, source, rewrite)


def _dims(nd: int, at: Mapping[int, Any]) -> list[Any]:
    spec: list[Any] = [None] * nd
    for d, md in at.items():
        spec[d] = md
    return spec


def _axis(t: Tensor, d: int, what: str, source: str) -> int:
    if not -t.ndim <= d < t.ndim:
        raise PlanTargetError(f"{source}: tensor {t.name!r} {list(t.shape)} has no {what} dim "
                              f"{d}; it has dims 0..{t.ndim - 1}")
    return d % t.ndim


def _tensor_spec(t: Tensor, mesh: ProcessMesh, style: Style, source: str) -> Any:
    if isinstance(style, Spec):
        return style.spec
    if isinstance(style, Replicated):
        return [None] * t.ndim
    if isinstance(style, DataParallel):
        return _dims(t.ndim, {_axis(t, style.batch_dim, "batch", source): style.dim})
    if isinstance(style, SequenceParallel):
        return _dims(t.ndim, {_axis(t, style.sequence_dim, "sequence", source): style.dim})
    assert isinstance(style, Spatial)
    if len(style.layout) != t.ndim:
        raise PlanTargetError(f"{source}: layout {style.layout!r} has {len(style.layout)} dims "
                              f"but tensor {t.name!r} {list(t.shape)} has {t.ndim}; give "
                              "Spatial(layout=...) one letter per dim")
    at = {}
    for letter, md in style.dims.items():
        if letter not in style.layout:
            raise PlanTargetError(f"{source}: dim {letter!r} is not in layout {style.layout!r}; "
                                  f"name dims by the letters of the layout")
        at[style.layout.index(letter)] = md
    return _dims(t.ndim, at)


def _module_specs(module: str, params: Sequence[Tensor], style: Style, source: str
                  ) -> list[tuple[Tensor, Any]]:
    if isinstance(style, DataParallel | Replicated):
        return [(p, [None] * p.ndim) for p in params]
    own = {p.name[len(module) + 1:]: p for p in params}
    weight = own.get("weight")
    if weight is None:
        raise PlanTargetError(
            f"{source}: module {module!r} has no parameter {module + '.weight'!r} (it holds "
            f"{sorted(own)}); a {type(style).__name__} acts on a module's weight and bias")
    weight = _tied(module, weight)
    bias = own.get("bias")
    if isinstance(style, SequenceParallel):
        out: list[tuple[Tensor, Any]] = [(p, [None] * p.ndim) for p in own.values()
                                         if "." not in p.name[len(module) + 1:]]
        for op in weight.consumers:
            y = op.outputs[0]
            out.append((y, _dims(y.ndim, {_axis(y, style.sequence_dim, "sequence", source):
                                          style.dim})))
        return out
    md = style.dim  # type: ignore[union-attr]
    if isinstance(style, VocabParallel):
        # the vocabulary is an embedding's rows and an LM head's output features: one dim of a
        # weight the two tie, whichever module the entry names
        w_dim, b_split = _vocab_dim(weight, module, source)
    else:
        _, out_dim, in_dim = weight_use(weight, source, module)
        w_dim, b_split = (out_dim, True) if isinstance(style, ColwiseParallel) else (in_dim, False)
    specs: list[tuple[Tensor, Any]] = [(weight, _dims(weight.ndim, {w_dim: md}))]
    if bias is not None:
        specs.append((bias, _dims(bias.ndim, {bias.ndim - 1: md} if b_split else {})))
    return specs


def _tied(module: str, weight: Tensor) -> Tensor:
    """The parameter ``module`` uses as its weight: its own, or, when no op reads its own, the one
    parameter its ops read as a weight (an embedding tied to the LM head: torch.export reads the
    shared tensor under one of its names, and the other is left unread)."""
    if weight.consumers:
        return weight
    graph = weight.graph
    assert isinstance(graph, Graph)
    read = [t for t in graph.params if t is not weight and any(
        op.name.startswith(f"{module}.") and op.inputs.index(r) == 1
        for op, _, r in _uses(t, tuple(range(t.ndim))))]
    return read[0] if len(read) == 1 else weight


def _feature_uses(weight: Tensor, source: str) -> list[tuple[str, int, int, Op]]:
    """(kind, output-feature dim, input-feature dim, op) for each op using ``weight`` as its
    weight, through transposes; for an embedding the "input" dim is the vocabulary."""
    found: list[tuple[str, int, int, Op]] = []
    for op, perm, read in _uses(weight, tuple(range(weight.ndim))):
        if op.inputs.index(read) != 1:
            raise PlanTargetError(
                f"{source}: {weight.name!r} is not the weight operand of {op.type} op "
                f"{op.name!r}; annotate it with a raw spec instead")
        use = WEIGHT_USES[op.type]
        n, k = use.dims(op, read.ndim)
        found.append((use.kind, perm[n], perm[k], op))
    if not found:
        raise PlanTargetError(
            f"{source}: no matmul or embedding uses {weight.name!r} {list(weight.shape)} as its "
            "weight, so it has no output or input features; use a raw spec for it")
    return found


def _own_uses(weight: Tensor, module: str, source: str) -> list[tuple[str, int, int, Op]]:
    """The uses of ``weight`` by ``module``'s own ops (named under it), or every use when it has
    none (a graph built by hand, whose ops are not named by module)."""
    uses = _feature_uses(weight, source)
    own = [u for u in uses if module and u[3].name.startswith(f"{module}.")]
    return own or uses


def _vocab_dim(weight: Tensor, module: str, source: str) -> tuple[int, bool]:
    """(the vocabulary dim of ``weight``, whether ``module``'s bias is split with it)."""
    uses = _feature_uses(weight, source)
    dims = {u[2] if u[0] == "embedding" else u[1] for u in uses}
    if len(dims) > 1:
        raise PlanTargetError(f"{source}: the ops using {weight.name!r} disagree on its "
                              f"vocabulary dim ({sorted((u[3].name, u[0]) for u in uses)}); "
                              "use a raw spec for it")
    return dims.pop(), any(u[0] == "linear" for u in _own_uses(weight, module, source))


def weight_use(weight: Tensor, source: str = "weight_use", module: str = ""
               ) -> tuple[str, int, int]:
    """(``"linear"`` or ``"embedding"``, output-feature dim, input-feature dim) of ``weight``,
    read from the ops that use it (through transposes); with ``module``, from that module's own
    ops when it has some (a weight tied between modules is used differently by each). For an
    embedding table the "input" dim is the vocabulary."""
    found = {u[:3] for u in _own_uses(weight, module, source)}
    if len(found) > 1:
        raise PlanTargetError(
            f"{source}: the ops using {weight.name!r} disagree on its feature dims "
            f"({sorted(found)}); a weight tied between an embedding and an LM head takes "
            "VocabParallel() on either; otherwise use a raw spec for it")
    kind, out_dim, in_dim = found.pop()
    return kind, out_dim, in_dim


def _uses(t: Tensor, perm: tuple[int, ...]) -> Iterable[tuple[Op, tuple[int, ...], Tensor]]:
    """(op, perm, tensor read) for each matmul or embedding reached from ``t`` through
    transposes; ``perm[i]`` is the weight's dim at dim i of the tensor the op reads."""
    for op in t.consumers:
        if op.type in TRANSPOSES:
            p = op.attr("perm")
            yield from _uses(op.outputs[0], tuple(perm[j] for j in p))
        elif op.type in WEIGHT_USES:
            yield op, perm, t
