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
from spmdrules.engine.description import Describe, ShapeArg, register_described
from spmdrules.engine.registry import RULES, AttrParam, Rule, RuleFn, TensorParam, register_rule
from spmdrules.execution.adjoint import REVERSE_LOWERINGS, ReverseHook, register_reverse
from spmdrules.execution.halo import HALO_OPS, HaloWindows, register_windows
from spmdrules.execution.local import KERNELS, VJPS, Kernel, Vjp, register_kernel, register_vjp
from spmdrules.execution.lowering import LOWERINGS, LoweringHook, register_lowering
from spmdrules.execution.single_op import COLLECTIVES, Collective
from spmdrules.graph.shapes.shape_rule import SHAPE_RULES, DtypeFn, ShapeFn, same_dtype
from spmdrules.graph.shapes.shape_rule import register as register_shape
from spmdrules.plan.chunks import WEIGHT_USES, WeightUse, register_weight_use
from spmdrules.verify.cases.case import FAMILIES, Family, register_cases


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
                 "lowering", "lowering_reverse", "collective")
        for hook in hooks:
            v = getattr(self, hook)
            if v is not None and not callable(v) and not isinstance(v, Collective):
                raise OpSpecError(f"{where}: {hook}= must be callable, got {type(v).__name__}")
        if self.vjp is not None and self.kernel is None:
            raise OpSpecError(f"{where}: a VJP without a kernel cannot run; give kernel= too")


def _tables(spec: OpSpec) -> list[tuple[OpTable[Any], tuple[str, ...]]]:
    """The tables ``spec`` writes, with the keys it writes in each."""
    names = (spec.name, *spec.aliases)
    out: list[tuple[OpTable[Any], tuple[str, ...]]] = [(RULES, names), (SHAPE_RULES, names)]
    optional: list[tuple[object, OpTable[Any], tuple[str, ...]]] = [
        (spec.kernel, KERNELS, names), (spec.vjp, VJPS, names),
        (spec.cases, FAMILIES, (spec.family or spec.name,)), (spec.lowering, LOWERINGS, names),
        (spec.lowering_reverse, REVERSE_LOWERINGS, names), (spec.collective, COLLECTIVES, names),
        (spec.windows, HALO_OPS, names), (spec.weight_use, WEIGHT_USES, names),
    ]
    out += [(table, keys) for hook, table, keys in optional if hook is not None]
    return out


def register_op(spec: OpSpec) -> Rule:
    """Register every piece of ``spec``'s op in its layer's table and return its rule.

    Every table is checked before any is written: a name that one of them has already raises
    ``DuplicateRegistrationError`` (the op, the table, where each registration came from) and
    registers nothing."""
    if not isinstance(spec, OpSpec):
        raise OpSpecError(f"register_op: expected an OpSpec, got {type(spec).__name__}")
    origin = caller(1)
    for table, keys in _tables(spec):
        table.check_new(keys, origin)
    converters = _converters(spec)
    names = (spec.name, *spec.aliases)
    family = spec.family or spec.name
    if spec.describe is not None:
        rule = register_described(
            spec.name, spec.describe, inputs=spec.inputs, outputs=spec.outputs, attrs=spec.attrs,
            aliases=spec.aliases, reverse=bool(spec.reverse), family=family, doc=spec.doc,
            op_attrs=spec.op_attrs, key=spec.key, origin=origin)
    else:
        assert spec.forward is not None  # __post_init__: one of the two
        rule = register_rule(
            spec.name, forward=spec.forward,
            reverse=None if isinstance(spec.reverse, bool) else spec.reverse,
            inputs=spec.inputs, outputs=spec.outputs, attrs=spec.attrs, aliases=spec.aliases,
            family=family, doc=spec.doc, op_attrs=spec.op_attrs, origin=origin)
    register_shape(names, spec.shape, spec.dtype, family=family, origin=origin)
    if spec.kernel is not None:
        register_kernel(*names, origin=origin)(spec.kernel)
    if spec.vjp is not None:
        register_vjp(*names, origin=origin)(spec.vjp)
    if spec.cases is not None:
        register_cases(spec.cases, family=family, origin=origin)
    if spec.lowering is not None:
        register_lowering(names, spec.lowering, origin=origin)
    if spec.lowering_reverse is not None:
        register_reverse(names, spec.lowering_reverse, origin=origin)
    if spec.collective is not None:
        COLLECTIVES.add_all(names, spec.collective, origin)
    if spec.windows is not None:
        register_windows(names, spec.windows, origin=origin)
    if spec.weight_use is not None:
        register_weight_use(names, spec.weight_use, origin=origin)
    for register in converters:
        register()
    return rule


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
