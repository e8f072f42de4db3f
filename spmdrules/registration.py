"""One op, one registration: ``register_op(OpSpec(...))`` fills every layer's table for an op.

Each layer keeps its own table and the function that fills it (the rule registry, shape
inference, kernels, VJPs, verify's case generators, lowering hooks, the importers' converters);
the family modules inside the package call those. An op from outside the package (a plugin,
``docs/plugins.md``) is one ``OpSpec`` instead: its rule (a ``Description`` with its policy, or
rule functions), its shapes, kernel, VJP, verification cases and optional hooks. ``register_op``
checks every table first, so that a name clash (``DuplicateRegistrationError``, naming the
table and both origins) leaves no table half-filled, then fills them all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.tables import OpTable, caller
from spmdrules.engine.described import Describe, register_described
from spmdrules.engine.description import ShapeArg
from spmdrules.engine.registry import RULES, AttrParam, Rule, RuleFn, TensorParam, register_rule
from spmdrules.execution.adjoint import REVERSE_LOWERINGS, ReverseHook
from spmdrules.execution.halo import HALO_OPS, HaloWindows
from spmdrules.execution.local import KERNELS, VJPS, Kernel, Vjp
from spmdrules.execution.lowering import LOWERINGS, LoweringHook
from spmdrules.execution.single_op import COLLECTIVES, Collective
from spmdrules.graph.shapes.shape_rule import SHAPE_RULES, DtypeFn, ShapeFn, ShapeRule, same_dtype
from spmdrules.plan.chunks import WEIGHT_USES, WeightUse
from spmdrules.verify.cases.case import FAMILIES, Family


class OpSpecError(RuleArgumentError):
    """An ``OpSpec`` that cannot be registered: no rule or two, no shape function, a hook that
    is not callable."""


@dataclass(frozen=True)
class OpSpec:
    """Everything spmdrules needs to know of one op, for ``register_op``.

    The rule is either ``describe`` (``describe(*shapes, **attrs)`` returns the call's
    ``Description``: letters per tensor plus the op's policy; both directions are derived, and
    ``reverse=False`` registers none) or ``forward`` with an optional ``reverse`` (hand-written
    rule functions, as ``register_rule`` takes them: a DimTrans rule calls
    ``spmdrules.engine.dim_trans.infer`` there). ``family`` (default: the op's name) groups ops
    in verify's report and keys ``cases``, the generator ``cases(op, rng)`` of random valid calls
    (``spmdrules.verify.cases.case.Draft``).

    The hooks are for ops that are not one kernel call: ``lowering`` (and its
    ``lowering_reverse``) emits the op's own steps (``spmdrules.execution.lowering``),
    ``collective`` is the in-op communication one op run on the simulated mesh needs,
    ``windows`` makes the op's input halo-exchanged where it is spatially split, ``weight_use``
    lets plan styles find a weight's feature dims through the op. ``aten`` maps torch ops (as
    ``aten_converter`` takes them) and ``onnx`` ONNX op types (``domain.OpType`` outside the
    default domain) to converters onto registered ops.
    """

    name: str
    inputs: Sequence[TensorParam]
    outputs: Sequence[TensorParam]
    shape: ShapeFn
    attrs: Sequence[AttrParam] = ()
    describe: Describe | None = None
    key: Callable[[tuple[ShapeArg, ...]], Hashable] | None = None
    forward: RuleFn | None = None
    reverse: RuleFn | bool = True
    dtype: DtypeFn = same_dtype
    kernel: Kernel | None = None
    vjp: Vjp | None = None
    cases: Family | None = None
    family: str | None = None
    aliases: Sequence[str] = ()
    op_attrs: Sequence[AttrParam] = ()
    doc: str = ""
    lowering: LoweringHook | None = None
    lowering_reverse: ReverseHook | None = None
    collective: Collective | None = None
    windows: HaloWindows | None = None
    weight_use: WeightUse | None = None
    aten: Mapping[Any, Callable[..., Any]] = field(default_factory=dict)
    onnx: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"OpSpec({self.name!r})"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise OpSpecError(f"{where}: an op name is a Python identifier (it becomes "
                              f"spmdrules.ops.<name>), got {self.name!r}")
        if (self.describe is None) == (self.forward is None):
            raise OpSpecError(f"{where}: give its rule once, as describe= (a Description with "
                              "its policy) or as forward= (and reverse=) rule functions")
        if self.describe is not None and not isinstance(self.reverse, bool):
            raise OpSpecError(f"{where}: a described op derives its reverse rule; reverse= is "
                              "True or False there")
        hooks = ("shape", "dtype", "describe", "key", "forward", "kernel", "vjp", "cases",
                 "lowering", "lowering_reverse")
        for hook in hooks:
            v = getattr(self, hook)
            if v is not None and not callable(v):
                raise OpSpecError(f"{where}: {hook}= must be callable, got {type(v).__name__}")
        for hook, kind in (("windows", HaloWindows), ("weight_use", WeightUse),
                           ("collective", Collective)):
            v = getattr(self, hook)
            if v is not None and not isinstance(v, kind):
                raise OpSpecError(f"{where}: {hook}= must be a {kind.__name__}, got "
                                  f"{type(v).__name__}")
        if self.vjp is not None and self.kernel is None:
            raise OpSpecError(f"{where}: a VJP without a kernel cannot run; give kernel= too")


def _entries(spec: OpSpec) -> list[tuple[OpTable[Any], tuple[str, ...], object]]:
    """(table, keys, entry) of every table but the rules' that ``spec`` writes."""
    names = (spec.name, *spec.aliases)
    family = spec.family or spec.name
    optional: list[tuple[object, OpTable[Any], tuple[str, ...]]] = [
        (spec.kernel, KERNELS, names), (spec.vjp, VJPS, names), (spec.cases, FAMILIES, (family,)),
        (spec.lowering, LOWERINGS, names), (spec.lowering_reverse, REVERSE_LOWERINGS, names),
        (spec.collective, COLLECTIVES, names), (spec.windows, HALO_OPS, names),
        (spec.weight_use, WEIGHT_USES, names),
    ]
    return [(SHAPE_RULES, names, ShapeRule(spec.shape, spec.dtype, family)),
            *((table, keys, hook) for hook, table, keys in optional if hook is not None)]


def register_op(spec: OpSpec) -> Rule:
    """Register every piece of ``spec``'s op in its layer's table and return its rule.

    Every table is checked before any is written: a name that one of them has already raises
    ``DuplicateRegistrationError`` (the op, the table, where each registration came from) and
    registers nothing."""
    if not isinstance(spec, OpSpec):
        raise OpSpecError(f"register_op: expected an OpSpec, got {type(spec).__name__}")
    origin = caller(1)
    entries = _entries(spec)
    RULES.check_new((spec.name, *spec.aliases), origin)
    for table, keys, _ in entries:
        table.check_new(keys, origin)
    converters = _converters(spec)
    rule = _register_rule(spec, origin)
    for table, keys, entry in entries:
        table.add_all(keys, entry, origin)
    for register in converters:
        register()
    return rule


def _register_rule(spec: OpSpec, origin: str) -> Rule:
    family = spec.family or spec.name
    if spec.describe is not None:
        return register_described(
            spec.name, spec.describe, inputs=spec.inputs, outputs=spec.outputs, attrs=spec.attrs,
            aliases=spec.aliases, reverse=bool(spec.reverse), family=family, doc=spec.doc,
            op_attrs=spec.op_attrs, key=spec.key, origin=origin)
    assert spec.forward is not None  # __post_init__: one of the two
    return register_rule(
        spec.name, forward=spec.forward,
        reverse=None if isinstance(spec.reverse, bool) else spec.reverse,
        inputs=spec.inputs, outputs=spec.outputs, attrs=spec.attrs, aliases=spec.aliases,
        family=family, doc=spec.doc, op_attrs=spec.op_attrs, origin=origin)


def _converters(spec: OpSpec) -> list[Callable[[], object]]:
    """The converter registrations of ``spec``, each checked now and made later."""
    if not spec.aten and not spec.onnx:
        return []
    from spmdrules.importers.converters import aten_converter, onnx_converter

    decorators = [aten_converter(target) for target in spec.aten]  # each raises on a clash
    for op_type in spec.onnx:
        domain, _, bare = op_type.rpartition(".")
        decorators.append(onnx_converter(bare, domain=domain))
    fns = [*spec.aten.values(), *spec.onnx.values()]
    out: list[Callable[[], object]] = [
        functools.partial(deco, fn) for deco, fn in zip(decorators, fns, strict=True)]
    return out


__all__ = ["OpSpec", "OpSpecError", "register_op"]
