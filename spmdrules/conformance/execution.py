"""The execution check: both answers of a recorded case, Paddle's and ours, run on the simulated mesh.

For a case, the op call is rebuilt from the record: the forward op for forward and reverse records
(a reverse answer lays out the op's inputs and outputs), ``<op>_grad`` for gradient records;
absent optional inputs are None. Random values are drawn in each input's value domain
(:func:`domains`: ids in range of the table or axis they index, booleans for logical ops, reals
otherwise) and each answer is executed by :mod:`spmdrules.execution.single_op`, which judges it
*ok*, *malformed* (it gives no attribute, or one of another rank, to some argument, or claims
blocks of other shapes than the kernel computes), *wrong* (it computes another result) or
*error* (the kernel cannot run the case for another reason).

Paddle's answer runs as written, and, when that is malformed only in how it is written (the
format equivalences of :mod:`formats`: a slot it leaves out, an output it answers with a
placeholder), once more with those slots filled with ours: then it is *format* when that runs
ok. Not run: Paddle's errors (ours runs), our errors, the generic rules (no op of their own), ops
whose output shapes depend on the values (nonzero, unique), records shape inference refuses.

Training dropout (flash_attention with ``dropout > 0`` and ``is_test`` off) needs a random stream
every rank draws alike, which the simulated mesh does not model; those cases run without dropout
(the rules' layouts do not depend on it). fused_dropout_add runs with seed 7 (:data:`SIMULATED`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from spmdrules.conformance import formats, runner
from spmdrules.conformance.calls import build_call
from spmdrules.conformance.deviation import deviations, rule_module
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import AttrSlot, SpmdInfo, TensorSpec
from spmdrules.engine.registry import Rule, get_rule
from spmdrules.execution.domains import Arg, DomainArg, domain_dtype, draw_values_for
from spmdrules.execution.local import Kernel, LocalContext, LocalValue, get_kernel
from spmdrules.execution.single_op import (
    HarnessError,
    OpRun,
    Status,
    Trial,
    answer_slots,
    collective_for,
    execute,
)
from spmdrules.graph.shapes.shape_rule import TensorMeta, infer_meta

Verdict = Status | Literal["format", "not run"]
GENERIC = frozenset({"default_", "default_data_parallel", "replicated"})
#: attributes the simulated mesh runs a case with (see the module's doc)
SIMULATED: Mapping[str, Mapping[str, Any]] = {
    "flash_attention": {"dropout": 0.0},
    # a seed Paddle's records do not give: the default 0 makes the [seed, offset] pair zeros,
    # whose pending sum would read as complete
    "fused_dropout_add": {"seed": 7},
}


@dataclass(slots=True)
class Executed:
    """The verdicts of one case: ours, Paddle's, and why where not ok; ``compared``: how the
    comparison with Paddle went (``agree``, the deviation class, ``unexplained`` or ``crash``)."""

    case_id: str
    op: str
    ours: Verdict
    paddle: Verdict
    detail: str = ""
    compared: str = ""


@dataclass(slots=True)
class Tally:
    ours: dict[str, int] = field(default_factory=dict)
    paddle: dict[str, int] = field(default_factory=dict)

    def add(self, e: Executed) -> None:
        self.ours[e.ours] = self.ours.get(e.ours, 0) + 1
        self.paddle[e.paddle] = self.paddle.get(e.paddle, 0) + 1


# ---- the call, rebuilt from the record --------------------------------------------------------
def _absent_as_none(records: Sequence[Any], args: Sequence[Any]) -> tuple[Arg, ...]:
    """The call's tensor arguments as a kernel takes them: absent ones None, lists tuples."""
    return tuple(None if isinstance(t, dict) and t.get("absent") else
                 tuple(a) if isinstance(a, list) else a for t, a in zip(records, args, strict=True))


def _names(records: Sequence[Any]) -> list[str]:
    return [t["name"] if isinstance(t, dict) else t[0]["name"] if t else "" for t in records]


def _outputs(case: dict[str, Any], rule: Rule, args: Sequence[Any], ins: tuple[Arg, ...],
             doms: Sequence[DomainArg], attrs: Mapping[str, Any]) -> tuple[Arg, ...]:
    """The op's outputs: the record's (reverse), the inputs they are cotangents of (grad, by
    name), or shape inference's (forward)."""
    kind = formats.kind(case)
    if kind == "reverse":
        return _absent_as_none(case["outputs"], args[len(ins):])
    if kind == "grad":
        names = _names([*case["inputs"], *case.get("outputs", [])])
        picked = []
        for i, p in enumerate(rule.outputs):
            base = p.name.removesuffix("_grad")
            picked.append(ins[names.index(base)] if base in names else ins[i])
        return tuple(picked)
    metas: list[Any] = []
    for a, d in zip(ins, doms, strict=True):
        if a is None or d is None:
            metas.append(None)
        elif isinstance(a, TensorSpec):
            assert isinstance(d, str)
            metas.append(TensorMeta(a.shape, domain_dtype(d)))
        else:
            assert isinstance(d, tuple)
            metas.append(tuple(TensorMeta(t.shape, domain_dtype(x))
                               for t, x in zip(a, d, strict=True)))
    mesh = _mesh(case)
    out: list[Arg] = []
    for m in infer_meta(case["op"], metas, dict(attrs)):
        out.append(TensorSpec(m.shape, DistAttr.replicated(mesh, len(m.shape)))
                   if isinstance(m, TensorMeta) else
                   tuple(TensorSpec(t.shape, DistAttr.replicated(mesh, len(t.shape))) for t in m))
    return tuple(out)


def _mesh(case: dict[str, Any]) -> ProcessMesh:
    m = case["mesh"]
    return ProcessMesh.from_shape(m["shape"], m["process_ids"])


def op_run(case: dict[str, Any]) -> tuple[OpRun, Rule, tuple[DomainArg, ...]] | None:
    """The op call a case's answers lay out, its rule and its inputs' value domains; None for a
    generic rule (no op of its own) or an op whose output shapes depend on the values."""
    if case["op"] in GENERIC or case["op"] in DATA_DEPENDENT:
        return None
    name, _, args, attrs = build_call(case)
    rule = get_rule(name)
    n = len(case["inputs"]) if formats.kind(case) == "reverse" else len(args)
    records = [*case["inputs"], *case.get("outputs", [])][:n]
    ins = _absent_as_none(records, args[:n])
    full = {a.name: a.default for a in (*rule.attrs, *rule.op_attrs)}
    full.update(attrs)
    full.update(SIMULATED.get(case["op"], {}))
    doms = domains(case["op"], _names(records), ins, full)
    outs = _outputs(case, rule, args, ins, doms, full)
    op = name if formats.kind(case) == "grad" else case["op"]
    return OpRun(op, _mesh(case), ins, outs, full), rule, doms


# ---- value domains ----------------------------------------------------------------------------
_BOOL = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not"})
_INT = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"})
#: the domain of a reduction's input where the reduce type needs one: an all or any whose blocks
#: give both answers (mostly True, mostly False), a product of factors near 1
_REDUCED = {"all": "bool:0.9", "any": "bool:0.1", "product": "near1"}
_REDUCE_BASE_TYPES: tuple[str, ...] = rule_module("reduction").REDUCE_BASE_TYPES
#: ops whose output shapes depend on the values (the record's shapes cannot be drawn for)
DATA_DEPENDENT = frozenset({"nonzero", "unique"})


def _axis_size(x: Arg | None, attrs: Mapping[str, Any]) -> int:
    assert isinstance(x, TensorSpec)
    if not x.shape:
        return 1
    return max(1, x.shape[int(attrs.get("axis", 0)) % len(x.shape)])


def _rows(by: Mapping[str, Arg], name: str, dim: int, least: int = 1) -> int:
    t = by[name]
    assert isinstance(t, TensorSpec)
    return max(least, t.shape[dim])


def _gather_nd_ids(by: Mapping[str, Arg], attrs: Mapping[str, Any]) -> str:
    x, index = by["x"], by["index"]
    assert isinstance(x, TensorSpec) and isinstance(index, TensorSpec)
    return f"index:{max(1, min(x.shape[:index.shape[-1]], default=1))}"


def _cross_entropy_label(by: Mapping[str, Arg], attrs: Mapping[str, Any]) -> str:
    return "prob" if attrs.get("soft_label") else f"index:{_axis_size(by.get('x'), attrs)}"


def _rope_position_ids(by: Mapping[str, Arg], attrs: Mapping[str, Any]) -> str:
    table = by.get("sin")  # [1, rows, 1, d] or [rows, d]; without one, the sequence
    if isinstance(table, TensorSpec):
        return f"index:{max(1, table.shape[-3] if len(table.shape) == 4 else table.shape[0])}"
    return f"index:{_rows(by, 'position_ids', 1)}"


_IndexDomain = Callable[[Mapping[str, Arg], Mapping[str, Any]], str]


def _along_axis(by: Mapping[str, Arg], attrs: Mapping[str, Any]) -> str:
    return f"index:{_axis_size(by.get('x'), attrs)}"


#: (op, input) -> the ids domain of that index input, from the op's other inputs and attributes
_INDEX_DOMAINS: dict[tuple[str, str], _IndexDomain] = {
    **dict.fromkeys((("embedding", "x"), ("lookup_table_v2", "x")),
                    lambda by, _: f"index:{_rows(by, 'weight', 0, least=0)}"),
    # ids beyond the table's rows read zeros
    ("c_embedding", "x"): lambda by, attrs: (
        f"index:{int(attrs.get('start_index', 0)) + _rows(by, 'weight', 0, least=0) + 2}"),
    ("one_hot", "x"): lambda _, attrs: f"index:{max(1, int(attrs['num_classes']))}",
    ("gather_nd", "index"): _gather_nd_ids,
    ("scatter_nd_add", "index"): _gather_nd_ids,
    ("scatter", "index"): lambda by, _: f"index:{_rows(by, 'x', 0)}",
    **dict.fromkeys(((op, "index") for op in
                     ("gather", "index_select", "take_along_axis", "put_along_axis")), _along_axis),
    **dict.fromkeys(((op, "indices") for op in ("argsort", "topk", "cummax", "cummin")),
                    _along_axis),
    **dict.fromkeys(((op, "label") for op in (
        "c_softmax_with_cross_entropy", "c_softmax_with_multi_label_cross_entropy")),
        lambda by, _: f"index:{_rows(by, 'x', -1)}"),
    **dict.fromkeys(((op, "label") for op in (
        "cross_entropy_with_softmax", "softmax_with_cross_entropy")), _cross_entropy_label),
    ("moe_combine", "scatter_index"): lambda by, _: f"index:{_rows(by, 'x', 0)}",
    ("fused_rotary_position_embedding", "position_ids"): _rope_position_ids,
}


def _index(op: str, name: str, by: Mapping[str, Arg], attrs: Mapping[str, Any]) -> str | None:
    """The ids domain of an index input, or None for a value input."""
    domain = _INDEX_DOMAINS.get((op, name))
    return None if domain is None else domain(by, attrs)


def _domain(op: str, name: str, a: Arg, by: Mapping[str, Arg], attrs: Mapping[str, Any]
            ) -> DomainArg:
    if a is None:
        return None
    if isinstance(a, tuple):
        x = by.get("x")
        if op == "index_put" and name == "indices" and isinstance(x, TensorSpec):
            return tuple(f"index:{max(1, x.shape[j])}" for j in range(len(a)))  # ids of x's dims
        return ("real",) * len(a)
    if op == "roi_align" and name in ("boxes", "boxes_num"):
        return _roi_domain(name, by)
    return _value_kind(op, name, attrs) or _index(op, name, by, attrs) or "real"


def _value_kind(op: str, name: str, attrs: Mapping[str, Any]) -> str | None:
    """The domain an op's kind asks of its values (logical, bitwise, a reduction that needs
    one, probabilities, weights), or None."""
    if op in _BOOL or (op == "where" and name == "condition"):
        return "bool"
    if op in _INT:
        return "int"
    reduced = "product" if op == "prod" else op
    if op == "reduce_base" and isinstance(attrs.get("reduce_type"), int):
        reduced = _REDUCE_BASE_TYPES[attrs["reduce_type"] % len(_REDUCE_BASE_TYPES)]
    if reduced in _REDUCED and name == "x":
        return _REDUCED[reduced]
    if op == "label_smooth":
        return "prob"
    if op == "c_softmax_with_multi_label_cross_entropy" and name == "smooth_weight":
        return "positive"
    return None


def _roi_domain(name: str, by: Mapping[str, Arg]) -> str:
    """roi_align's boxes about the image (x is [N, C, H, W]) and boxes per image that sum to the
    number of boxes: the kernel refuses counts that do not."""
    x, boxes = by["x"], by["boxes"]
    assert isinstance(x, TensorSpec) and isinstance(boxes, TensorSpec)
    if name == "boxes":
        return f"boxes:{x.shape[2]}:{x.shape[3]}"
    return f"counts:{x.shape[0]}:{boxes.shape[0]}"


def domains(op: str, names: Sequence[str], ins: Sequence[Arg], attrs: Mapping[str, Any]
            ) -> tuple[DomainArg, ...]:
    """The value domain of each input of ``op`` (the forward op's name; gradient records too)."""
    by = dict(zip(names, ins, strict=True))
    return tuple(_domain(op, n, a, by, attrs) for n, a in zip(names, ins, strict=True))


# ---- Paddle's answer --------------------------------------------------------------------------
def _attr(mesh: ProcessMesh, e: Any) -> AttrSlot:
    if isinstance(e, list):
        return tuple(_attr(mesh, x) for x in e)  # type: ignore[misc]
    if e.get("process_mesh", 0) is None:
        return None  # Paddle's mesh-less placeholder: no attribute
    partial = {int(k): v for k, v in e.get("partial", {}).items()}
    if "multi_dims_mapping" in e:
        return DistAttr(mesh, multi_dims_mapping=e["multi_dims_mapping"], partial=partial)
    return DistAttr(mesh, e["dims_mapping"], partial)


def paddle_answer(case: dict[str, Any]) -> SpmdInfo:
    """Paddle's recorded answer as an SpmdInfo, as written (raises SpmdError when an attribute is
    invalid: a partial on a mesh dim that also shards, ...)."""
    mesh = _mesh(case)
    exp = case["expected"]
    return SpmdInfo([_attr(mesh, e) for e in exp["inputs"]],
                    [_attr(mesh, e) for e in exp["outputs"]])


def filled(case: dict[str, Any], paddle: SpmdInfo, ours: SpmdInfo) -> SpmdInfo | None:
    """Paddle's answer with the slots it writes in another format (:mod:`formats`) taken from
    ours; None when nothing is to fill."""
    ins, outs = list(paddle.inputs), list(paddle.outputs)
    changed = False
    skip = formats.omitted_input(case)
    if skip is not None and len(ins) == len(ours.inputs) - 1:
        ins.insert(skip.index, ours.inputs[skip.index])
        changed = True
    exp = case["expected"]["outputs"]
    for i, (e, g, how) in enumerate(zip(exp, ours.outputs, _output_hows(case, ours), strict=False)):
        if how == "unwritten" or (how == "placeholder" and formats.is_placeholder(e)):
            changed = changed or outs[i] != g
            outs[i] = g
    return SpmdInfo(ins, outs) if changed else None


def _output_hows(case: dict[str, Any], ours: SpmdInfo) -> list[formats.How]:
    slots = formats.pairs(case, ours)
    n_out = len(case["expected"]["outputs"])
    return [how for *_, how in slots[-n_out:]] if slots is not None and n_out else []


# ---- running ----------------------------------------------------------------------------------
def _kernel(run: OpRun) -> Kernel:
    """The op's kernel, without its blocks of the outputs the record gives as absent (a kernel
    may write a placeholder for one, as rope's out_v without v): nothing to compare there."""
    kernel = get_kernel(run.op)
    absent = {i for i, o in enumerate(run.outputs) if o is None}
    if not absent:
        return kernel

    def without_absent(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
        return tuple(None if i in absent else b for i, b in enumerate(kernel(ctx, blocks)))

    return without_absent


def _verdict(run: OpRun, rule: Rule, doms: Sequence[DomainArg], info: SpmdInfo, seed: int,
             serial: tuple[LocalValue, ...] | None = None) -> Trial:
    try:
        ins, outs = answer_slots(run, info, rule.inputs, rule.outputs)
    except HarnessError as e:
        return Trial("malformed", str(e), serial or ())
    rng = np.random.default_rng(seed)  # the same values for every answer of the case
    values = [draw_values_for(d, a, rng) for d, a in zip(doms, run.inputs, strict=True)]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        trial = execute(run, _kernel(run), values, ins, outs, rng, collective_for(run.op), serial)
    if serial is not None and not trial.serial:
        trial.serial = serial
    return trial


def check_case(case: dict[str, Any], ours: SpmdInfo | BaseException, seed: int = 0) -> Executed:
    """Execute our answer and Paddle's for one case (``ours``: our rule's answer or error)."""
    cid, op = case["case_id"], case["op"]
    if isinstance(ours, BaseException):
        return Executed(cid, op, "not run", "not run")
    try:
        built = op_run(case)
        if built is not None:
            get_kernel(built[0].op)
    except SpmdError as e:  # shape inference refuses the record, or the op has no kernel
        return Executed(cid, op, "not run", "not run", str(e))
    if built is None:
        return Executed(cid, op, "not run", "not run")
    run, rule, doms = built
    trial = _verdict(run, rule, doms, ours, seed)
    mine, why = trial.status, trial.detail
    if "error" in case["expected"]:  # Paddle raised: only ours to run
        return Executed(cid, op, mine, "not run", f"ours: {why}" if why else "")
    try:
        paddle = paddle_answer(case)
    except SpmdError as e:
        return Executed(cid, op, mine, "malformed", f"ours: {why}; Paddle's: {e}")
    serial = trial.serial or None
    theirs_trial = _verdict(run, rule, doms, paddle, seed, serial)
    theirs: Verdict = theirs_trial.status
    pwhy = theirs_trial.detail
    other = filled(case, paddle, ours) if theirs == "malformed" else None
    if other is not None:  # written in another format: run it in ours
        again = _verdict(run, rule, doms, other, seed, serial)
        theirs, pwhy = ("format" if again.status == "ok" else again.status), again.detail
    detail = "; ".join(f"{who}: {w}" for who, w in (("ours", why), ("Paddle's", pwhy)) if w)
    return Executed(cid, op, mine, theirs, detail)


def check_result(case: dict[str, Any], r: runner.CaseResult, seed: int = 0) -> Executed:
    """Both answers of a case executed, given its comparison with Paddle's (``run_case``)."""
    compared = r.verdict if r.verdict != "disagree" else r.deviation or "unexplained"
    if r.answer is None:  # a crash: nothing to run
        return Executed(r.case_id, r.op, "not run", "not run", r.detail, compared)
    e = check_case(case, r.answer, seed)
    e.compared = compared
    return e


def check_cases(cases: Iterable[dict[str, Any]], seed: int = 0) -> list[Executed]:
    """Every case compared with Paddle (``runner.run_case``) and both answers executed."""
    return [check_result(case, runner.run_case(case), seed) for case in cases]


def op_table(executed: Iterable[Executed]) -> str:
    """Per op, how many of our answers and of Paddle's execute ok, and how the others fail."""
    per: dict[str, Tally] = {}
    for e in executed:
        per.setdefault(e.op, Tally()).add(e)
    cols = ("ok", "malformed", "wrong", "error")
    rows = [("op", "run", *(f"ours {c}" for c in cols), "Paddle ok", "Paddle format",
             *(f"Paddle {c}" for c in cols[1:]))]
    for op in sorted(per):
        t = per[op]
        run = sum(n for v, n in t.ours.items() if v != "not run")
        rows.append((op, str(run), *(str(t.ours.get(c, 0)) for c in cols),
                     *(str(t.paddle.get(c, 0)) for c in ("ok", "format", *cols[1:]))))
    return _markdown(rows)


def proof_table(executed: Iterable[Executed]) -> str:
    """Per deviation class, how Paddle's answers to its cases run (the proofs of
    docs/deviations.md): malformed, wrong or error where the class claims ``execution``, ok where
    it claims ``parallelism``; the cases where Paddle's answer or ours is not run are left out."""
    kinds = {d.name: d.kind for d in deviations()}
    per: dict[str, dict[str, int]] = {}
    for e in executed:
        if e.compared in kinds and e.paddle != "not run" and e.ours != "not run":
            row = per.setdefault(e.compared, {})
            row[e.paddle] = row.get(e.paddle, 0) + 1
    verdicts = ("malformed", "wrong", "error", "ok")
    rows = [("class", "kind", "run", *(f"Paddle's {v}" for v in verdicts))]
    rows += [(f"`{k}`", kinds[k], str(sum(per[k].values())), *(str(per[k].get(v, 0))
                                                               for v in verdicts))
             for k in sorted(per)]
    return _markdown(rows)


def _markdown(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)
