"""Registering an op by its description: ``register_described`` binds a ``describe`` function
to the registry, remembering each call's Description (and its CompiledRule) per key, and runs
the op's checks on every call; ``Switches`` turns the remembered path off for the tests that hold
it against the general inference (:mod:`spmdrules.engine.description`)."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.core.tables import caller
from spmdrules.engine.compiled import CompiledRule, compile_rule
from spmdrules.engine.derived import mark_derived
from spmdrules.engine.description import (
    Arg,
    Description,
    ShapeArg,
    infer_forward,
    infer_reverse,
)
from spmdrules.engine.masks import carry, plain
from spmdrules.engine.registry import AttrParam, Rule, TensorParam, register_rule

DESCRIBE_CACHE: Final = 4096


def _masked(args: Sequence[Arg]) -> bool:
    return any(type(a) is TensorSpec and a.attr.mask_items for a in args)


def _carried(desc: Description, args: Sequence[Arg]) -> SpmdInfo:
    """The answer for the inputs as plain sums, with the masks ``desc.policy.masks`` keeps."""
    info = infer_forward(desc, [plain(a) if type(a) is TensorSpec else a for a in args])
    operands = [(a, ls) if type(a) is TensorSpec and isinstance(ls, str) else None
                for a, ls in zip(args, desc.inputs, strict=True)]
    outs = [ls for ls in desc.outputs if isinstance(ls, str)]
    return carry(info, operands, outs, product=desc.policy.masks == "product")

def _piece_names(inputs: tuple[str, ...], outputs: Sequence[TensorParam], d: Description
                 ) -> tuple[str, ...]:
    """The names of a description's flat outputs: a list output's pieces as ``name[j]``."""
    pieces = len(d.outputs) - len(outputs) + 1
    out: list[str] = []
    for p in outputs:
        out += [f"{p.name}[{j}]" for j in range(pieces)] if p.kind == "list" else [p.name]
    return (*inputs, *out)


def _splice(outs: Sequence[Any], spliced: Sequence[bool]) -> tuple[Any, ...]:
    """The given outputs with each list output's pieces in its place."""
    return tuple(t for o, s in zip(outs, spliced, strict=True) for t in (o if s else (o,)))


def _as_sides(info: SpmdInfo) -> SpmdInfo:
    """An answer for ``(ins, outs)``: each list's attributes, as the op's inputs and outputs."""
    ins, outs = info.inputs
    assert isinstance(ins, tuple) and isinstance(outs, tuple)
    return SpmdInfo(ins, outs)


# ---- registering an op by its description -------------------------------------------------------
Describe = Callable[..., Description]


class Switches:
    """``fast = False`` makes every described rule describe each call afresh and answer by the
    general inference: the definition the remembered descriptions and the plans must equal
    (``tests/engine/test_description_plans.py`` compares the two on Paddle's recorded cases)."""

    fast: bool = True


def _arg_ranks(args: Sequence[Arg]) -> Hashable:
    """``ranks`` of the arguments' shapes."""
    return tuple([None if a is None else len(a.shape) if type(a) is TensorSpec
                  else tuple([len(t.shape) for t in a]) for a in args])  # type: ignore[union-attr]


def ranks(shapes: tuple[ShapeArg, ...]) -> Hashable:
    """A description key: the tensors' ranks (None for an absent one, a tuple for a list)."""
    return tuple(None if s is None else len(s) if not s or type(s[0]) is int
                 else tuple(map(len, s)) for s in shapes)  # type: ignore[arg-type]


def _shape_of(a: Arg) -> ShapeArg:
    if a is None:
        return None
    if isinstance(a, TensorSpec):
        return a.shape
    return tuple(t.shape for t in a)


def register_described(
    name: str,
    describe: Describe,
    *,
    inputs: Sequence[TensorParam],
    outputs: Sequence[TensorParam],
    attrs: Sequence[AttrParam] = (),
    aliases: Sequence[str] = (),
    reverse: bool = True,
    family: str | None = None,
    doc: str = "",
    op_attrs: Sequence[AttrParam] = (),
    key: Callable[[tuple[ShapeArg, ...]], Hashable] | None = None,
    check: Callable[..., None] | None = None,
    masks: bool = False,
    check_reverse: Callable[..., None] | None = None,
    check_forward: Callable[..., None] | None = None,
    reverse_attrs: Sequence[AttrParam] | None = None,
    origin: str | None = None,
    sides: bool = False,
) -> Rule:
    """Register ``name`` with forward (and reverse) inference derived from ``describe``.

    ``describe(*shapes, **attrs)`` receives each tensor argument's global shape (None when absent,
    a tuple of shapes for a list) and the attributes by name, and returns the Description of the
    call; it raises a RuleArgumentError for a call the op cannot take. ``op_attrs`` are the
    op's attributes beyond the rule's (see ``register_rule``); ``describe`` does not see them.

    Descriptions are remembered per call's shapes and attributes. ``key`` declares that the
    description (and every error ``describe`` raises) depends on the shapes only through
    ``key(shapes)``, ``ranks`` for most ops: a call with new sizes of known ranks then reuses the
    description. ``python -m spmdrules.verify`` draws many sizes per rank, so a key that forgets
    something the description needs shows as a wrong case. ``check(*shapes, *attrs)`` (the
    attribute values in the rule's order) runs on every call before the remembered description is
    used: the errors that depend on more than the key (a slice's range against its dim's size)
    belong there. ``check_reverse(*shapes, *output shapes, *attrs)`` runs likewise on every
    reverse call, before ``check``: the outputs must be what the inputs give (a broadcast's
    result shape); ``check_forward(*shapes, *attrs)`` on every forward call, before ``check``.
    ``reverse_attrs``: the reverse rule takes fewer attributes (see ``register_rule``); the
    others keep their defaults when the op is described in reverse.
    ``masks``: the rule takes masked pending sums; the description's ``policy.masks`` says which
    results stay masked. ``sides``: the op's two list arguments are its inputs and its outputs,
    both given in either direction (Paddle's generic rules take ``(ins, outs)``); the answer
    holds the first list's attributes as its inputs and the second's as its outputs.
    """
    n = len(inputs)
    # a list output answers flat, one attribute per piece (as Paddle's split): the description
    # names each piece, and reverse inference reads the given pieces flat
    spliced = [p.kind == "list" for p in outputs]
    attr_names = tuple(a.name for a in attrs)
    names = tuple(p.name for p in (*inputs, *outputs))
    sig = inspect.signature(describe)
    takes_all = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    wanted = attr_names if takes_all else tuple(a for a in attr_names if a in sig.parameters)

    cache: dict[Hashable, tuple[Description, CompiledRule]] = {}

    def described(args: Sequence[Arg], values: tuple[Any, ...]) -> tuple[Description, CompiledRule]:
        if check is not None:
            check(*map(_shape_of, args), *values)
        k: Hashable = None
        if not Switches.fast:
            pass
        elif key is ranks:  # read off the specs: no shapes tuple to build on the common call
            k = (_arg_ranks(args), values)
        else:
            shapes = tuple(map(_shape_of, args))
            k = (shapes if key is None else key(shapes), values)
        try:
            if k is not None:
                return cache[k]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute value (a list): describe every time
            k = None
        shapes = tuple(map(_shape_of, args))
        kw = {a: v for a, v in zip(attr_names, values, strict=True) if a in wanted}
        d = describe(*shapes, **kw)
        d = dataclasses.replace(d, names=names if not any(spliced)
                                else _piece_names(names[:n], outputs, d))
        entry = (d, compile_rule(d))
        if k is not None:
            if len(cache) >= DESCRIBE_CACHE:
                cache.clear()
            cache[k] = entry
        return entry

    def forward(*call: Any) -> SpmdInfo:
        args = call[:n]
        if check_forward is not None:
            check_forward(*map(_shape_of, args), *call[n:])
        desc, plan = described(args, call[n:])
        if sides:
            return _as_sides(infer_forward(desc, args))
        if masks and desc.policy.masks != "none" and _masked(args):
            return _carried(desc, args)
        return (Switches.fast and plan.forward(args)) or infer_forward(desc, args)

    rev_names = None if reverse_attrs is None else tuple(a.name for a in reverse_attrs)

    def backward(*call: Any) -> SpmdInfo:
        args, outs = call[:n], call[n : n + len(outputs)]
        values = call[n + len(outputs):]
        if check_reverse is not None:
            check_reverse(*map(_shape_of, args), *map(_shape_of, outs), *values)
        if rev_names is not None:
            given = dict(zip(rev_names, values, strict=True))
            values = tuple(given.get(a.name, a.default) for a in attrs)
        desc, plan = described(args, values)
        if sides:
            return _as_sides(infer_reverse(desc, args, outs))
        if any(spliced):
            outs = _splice(outs, spliced)
        return (Switches.fast and plan.reverse(args, outs)) or infer_reverse(desc, args, outs)

    # the op's entry points lead to its description, which lives in the family's module
    forward.__wrapped__ = backward.__wrapped__ = describe  # type: ignore[attr-defined]
    if family is None:
        family = sys._getframe(1).f_globals.get("__name__", "").rsplit(".", 1)[-1]  # noqa: SLF001 -- the caller's module
    rule = register_rule(
        name, forward=forward, reverse=backward if reverse else None, inputs=inputs,
        outputs=outputs, attrs=attrs, aliases=aliases, family=family, doc=doc, op_attrs=op_attrs,
        masks=masks, reverse_attrs=reverse_attrs,
        origin=origin if origin is not None else caller(1),
    )
    mark_derived((name, *aliases), "description")
    return rule
