"""The rule registry: op name -> Rule, with Paddle's argument names, defaults and binding.

A Rule binds a call by position or keyword in Paddle's order (tensors, then attributes), checks it
once, and memoises the answer on the immutable arguments in a bounded cache.
"""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from spmdrules.core.errors import (
    RuleArgumentError,
    SpmdError,
    UnknownOpError,
    UnsupportedError,
    did_you_mean,
)
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.core.tables import OpTable, caller
from spmdrules.engine.attributes import A as A  # rules declare attributes with the registry's A
from spmdrules.engine.attributes import AttrParam as AttrParam
from spmdrules.engine.attributes import check_attr as _check_attr
from spmdrules.engine.masks import plain

TensorKind = Literal["tensor", "optional", "list"]
RuleFn = Callable[..., SpmdInfo]

CACHE_SIZE: Final = 8192


@dataclass(frozen=True, slots=True)
class TensorParam:
    """A tensor argument: one tensor, an optional one (``None`` when absent) or a list."""

    name: str
    kind: TensorKind = "tensor"


def T(name: str) -> TensorParam:
    return TensorParam(name, "tensor")


def Opt(name: str) -> TensorParam:
    return TensorParam(name, "optional")


def Vec(name: str) -> TensorParam:
    return TensorParam(name, "list")


_EXACT_TYPES: Final[dict[str, type | str]] = {
    "bool": bool, "int": int, "float": float, "number": "number", "str": str, "ints": "ints",
}


def _check_tensor(op: str, p: TensorParam, v: Any) -> Any:
    if p.kind == "list":
        if isinstance(v, list | tuple):
            for i, e in enumerate(v):
                if not isinstance(e, TensorSpec):
                    raise RuleArgumentError(
                        f"{op}: element {i} of tensor list {p.name!r} must be a TensorSpec, got {e!r}"
                    )
            return tuple(v)
        raise RuleArgumentError(f"{op}: tensor argument {p.name!r} must be a list of TensorSpec")
    if isinstance(v, TensorSpec):
        return v
    if v is None and p.kind == "optional":
        return None
    what = "a TensorSpec or None" if p.kind == "optional" else "a TensorSpec"
    raise RuleArgumentError(f"{op}: tensor argument {p.name!r} must be {what}, got {v!r}")


def _unmasked(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """``args`` with every tensor's masks dropped (``spmdrules.engine.masks``), or None when no
    tensor has one: a rule that does not declare masks sees a masked sum as the plain pending
    sum it also is, and can then never pass a mask to a result whose dims it moved."""
    found = False
    for a in args:
        if type(a) is TensorSpec:
            if a.attr.mask_items:
                found = True
                break
        elif type(a) in (tuple, list) and any(
                type(t) is TensorSpec and t.attr.mask_items for t in a):
            found = True
            break
    if not found:
        return None

    def unmasked(a: Any) -> Any:
        if type(a) is TensorSpec:
            return plain(a)
        if type(a) in (tuple, list):
            return type(a)(unmasked(t) for t in a)
        return a

    return tuple(unmasked(a) for a in args)


def _plain_call(args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if (plain := _unmasked(args)) is not None:
        args = plain
    if kwargs and (named := _unmasked(tuple(kwargs.values()))) is not None:
        kwargs = dict(zip(kwargs, named, strict=True))
    return args, kwargs


class _Binding:
    """One calling convention: tensor params then attrs; binds, checks and memoises."""

    __slots__ = (
        "attr_types", "attrs", "cached", "fn", "int_lists", "kinds", "list_at", "may_list",
        "n_full", "n_tensors", "names", "op", "params",
    )

    def __init__(
        self, op: str, fn: RuleFn, tensors: Sequence[TensorParam], attrs: Sequence[AttrParam]
    ) -> None:
        self.op = op
        self.fn = fn
        self.params: tuple[TensorParam, ...] = tuple(tensors)
        self.attrs: tuple[AttrParam, ...] = tuple(attrs)
        self.n_tensors = len(self.params)
        self.n_full = self.n_tensors + len(self.attrs)
        all_names = [p.name for p in self.params] + [a.name for a in self.attrs]
        self.names = {n: i for i, n in enumerate(all_names)}
        self.kinds = tuple(p.kind for p in self.params)
        #: positions that may receive a Python list (variadic tensors, list attributes)
        self.list_at = tuple(i for i, k in enumerate(self.kinds) if k == "list") + tuple(
            self.n_tensors + j for j, a in enumerate(self.attrs) if a.type in ("ints", "floats")
        )
        self.may_list = bool(self.list_at)
        #: int-list attributes: ``(1.0, 0.0) == (1, 0)`` with one hash, so their element types
        #: are checked before the memo is asked (a memo typed by argument sees only "tuple")
        self.int_lists = tuple(
            self.n_tensors + j for j, a in enumerate(self.attrs) if a.type == "ints")
        self.attr_types: tuple[type | str | None, ...] = tuple(
            _EXACT_TYPES.get(a.type) for a in self.attrs
        )
        # typed, over the unpacked call: 0.0, False and 0 are equal with one hash, so the memo
        # keys each argument by its type too, and only the valid one can hit it
        self.cached = functools.lru_cache(maxsize=CACHE_SIZE, typed=True)(self._run_args)

    def keyable(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The call with its lists as tuples, so that it can be memoised; None when an int-list
        attribute holds something else than ints (the call must be checked, not looked up)."""
        out = list(args)
        for i in self.list_at:
            v = out[i]
            if type(v) is list:
                out[i] = v = tuple(v)
            if type(v) is tuple and i in self.int_lists:
                for e in v:
                    if type(e) is not int:
                        return None
        return tuple(out)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        op = self.op
        if len(args) > self.n_full:
            raise RuleArgumentError(
                f"{op}: takes {self.n_full} arguments ({self.signature()}) but {len(args)} were given"
            )
        vals: list[Any] = list(args) + [_MISSING] * (self.n_full - len(args))
        for k, v in kwargs.items():
            i = self.names.get(k)
            if i is None:
                hint = did_you_mean(k, self.names)
                raise RuleArgumentError(f"{op}: unknown argument {k!r}{hint} ({self.signature()})")
            if vals[i] is not _MISSING:
                raise RuleArgumentError(f"{op}: argument {k!r} given twice")
            vals[i] = v
        for i, p in enumerate(self.params):
            v = vals[i]
            if v is _MISSING:
                if p.kind == "optional":
                    vals[i] = None
                    continue
                raise RuleArgumentError(
                    f"{op}: missing tensor argument {p.name!r} ({self.signature()})"
                )
            vals[i] = v if type(v) is TensorSpec else _check_tensor(op, p, v)
        for j, a in enumerate(self.attrs):
            i = self.n_tensors + j
            v = vals[i]
            vals[i] = a.default if v is _MISSING else _check_attr(op, a, v)
        return tuple(vals)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpmdInfo:
        if not kwargs and len(args) == self.n_full:
            # Lists (variadic tensors, int-list attrs) become tuples so the call can be memoised.
            if self.may_list:
                keyed = self.keyable(args)
                if keyed is None:
                    return self._run(self.bind(args, kwargs))
                args = keyed
            try:
                return self.cached(*args)
            except TypeError as e:  # still unhashable (e.g. a list nested in a tuple): bind it
                if "unhashable" not in str(e):
                    raise
        return self.cached(*self.bind(args, kwargs))

    def _already_valid(self, full: tuple[Any, ...]) -> bool:
        """The common case, checked cheaply: exact types, every tensor on one mesh."""
        return self._tensors_fit(full) and self._attrs_fit(full)

    def _tensors_fit(self, full: tuple[Any, ...]) -> bool:
        """Each tensor slot holds a TensorSpec (a list slot a tuple of them, an optional one
        maybe None), all on one mesh."""
        mesh = None
        for kind, v in zip(self.kinds, full, strict=False):
            if type(v) is TensorSpec:
                ts: tuple[Any, ...] = (v,)
            elif v is None:
                if kind != "optional":
                    return False
                continue
            elif kind == "list" and type(v) is tuple:
                ts = v
            else:
                return False
            for t in ts:
                if type(t) is not TensorSpec:
                    return False
                m = t.attr.mesh
                if mesh is None:
                    mesh = m
                elif m is not mesh and m != mesh:
                    return False
        return True

    def _attrs_fit(self, full: tuple[Any, ...]) -> bool:
        """Each attribute has its exact type already (an int list as a tuple of ints)."""
        i = self.n_tensors
        for want in self.attr_types:
            v = full[i]
            i += 1
            if type(v) is want:
                continue
            if want == "number" and (type(v) is int or type(v) is float):
                continue
            if want != "ints" or type(v) is not tuple:
                return False
            for e in v:
                if type(e) is not int:
                    return False
        return True

    def _run_args(self, *full: Any) -> SpmdInfo:
        return self._run(full)

    def _run(self, full: tuple[Any, ...]) -> SpmdInfo:
        checked = full if self._already_valid(full) else self._checked(full)
        try:
            return self.fn(*checked)
        except SpmdError as e:
            if str(e).startswith(f"{self.op}:") or isinstance(e, UnknownOpError):
                raise
            raise type(e)(f"{self.op}: {e}") from e

    def _checked(self, full: tuple[Any, ...]) -> tuple[Any, ...]:
        checked = self.bind(full, {})
        mesh = None
        for v in checked[: self.n_tensors]:
            for t in v if isinstance(v, tuple) else (v,):
                if t is None:
                    continue
                if mesh is None:
                    mesh = t.attr.mesh
                elif t.attr.mesh != mesh:
                    raise UnsupportedError(
                        f"{self.op}: all tensors of one call must be on the same ProcessMesh; "
                        f"got {mesh!r} and {t.attr.mesh!r}. Reshard them onto one mesh first"
                    )
        return checked

    def signature(self) -> str:
        parts = []
        for p in self.params:
            parts.append(
                f"[{p.name}...]"
                if p.kind == "list"
                else (f"{p.name}?" if p.kind == "optional" else p.name)
            )
        parts += [f"{a.name}={a.default!r}" for a in self.attrs]
        return f"{self.op}({', '.join(parts)})"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Final = _Missing()


class Rule:
    """A registered SPMD rule: ``infer_forward`` and, where the op has one, ``infer_reverse``."""

    __slots__ = (
        "_fwd", "_rev", "aliases", "attrs", "doc", "family", "inputs", "masks", "name", "op_attrs",
        "outputs",
    )

    def __init__(
        self,
        name: str,
        *,
        forward: RuleFn,
        reverse: RuleFn | None,
        inputs: Sequence[TensorParam],
        outputs: Sequence[TensorParam],
        attrs: Sequence[AttrParam] = (),
        reverse_attrs: Sequence[AttrParam] | None = None,
        aliases: Sequence[str] = (),
        family: str = "",
        doc: str = "",
        op_attrs: Sequence[AttrParam] = (),
        masks: bool = False,
    ) -> None:
        self.name = name
        #: the forward rule takes masked pending sums and says which results stay masked
        #: (``spmdrules.engine.masks``); any other rule sees them as plain pending sums
        self.masks = masks
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.attrs = tuple(attrs)
        #: attributes of the op that the rule does not take (scale's ``scale``, clip's bounds):
        #: a graph op carries them for shape inference and its kernel
        self.op_attrs = tuple(op_attrs)
        taken = {a.name for a in self.attrs} | {p.name for p in (*self.inputs, *self.outputs)}
        for a in self.op_attrs:
            if a.name in taken:
                raise SpmdError(f"register_rule: {name}: op attribute {a.name!r} is also a rule "
                                "argument; list it once")
        self.aliases = tuple(aliases)
        self.family = family
        self.doc = doc
        self._fwd = _Binding(name, forward, self.inputs, self.attrs)
        self._rev = (
            None
            if reverse is None
            else _Binding(
                name,
                reverse,
                (*self.inputs, *self.outputs),
                self.attrs if reverse_attrs is None else reverse_attrs,
            )
        )

    def infer_forward(self, *args: Any, **kwargs: Any) -> SpmdInfo:
        """Infer the outputs' attributes (and corrected inputs) from the inputs'."""
        b = self._fwd
        if not self.masks:
            args, kwargs = _plain_call(args, kwargs)
        if not kwargs and len(args) == b.n_full:
            keyed = b.keyable(args) if b.may_list else args  # lists as tuples, to be memoised
            if keyed is None:
                return b(args, kwargs)
            try:  # the common call, without a further Python frame
                return b.cached(*keyed)
            except TypeError as e:
                if "unhashable" not in str(e):
                    raise
        return b(args, kwargs)

    def infer_reverse(self, *args: Any, **kwargs: Any) -> SpmdInfo:
        """Infer the inputs' attributes from the outputs': ``(inputs..., outputs..., **attrs)``."""
        b = self._rev
        if b is None:
            raise UnsupportedError(
                f"{self.name}: has no reverse rule (Paddle registers none); infer it forward "
                "from its inputs instead"
            )
        # a mask comes only from the op that computes the sum: reverse inference asks for none
        args, kwargs = _plain_call(args, kwargs)
        if not kwargs and len(args) == b.n_full:
            keyed = b.keyable(args) if b.may_list else args
            if keyed is None:
                return b(args, kwargs)
            try:
                return b.cached(*keyed)
            except TypeError as e:
                if "unhashable" not in str(e):
                    raise
        return b(args, kwargs)

    @property
    def has_reverse(self) -> bool:
        return self._rev is not None

    @property
    def reverse_attrs(self) -> tuple[AttrParam, ...] | None:
        """The reverse rule's attributes (None without a reverse rule); usually the forward
        ones, but some reverse rules take fewer (reduce_base's drops reduce_type)."""
        return None if self._rev is None else tuple(self._rev.attrs)

    def signature(self, direction: Literal["forward", "reverse"] = "forward") -> str:
        b = self._fwd if direction == "forward" else self._rev
        if b is None:
            return f"{self.name}: no reverse rule"
        return b.signature()

    def cache_clear(self) -> None:
        self._fwd.cached.cache_clear()
        if self._rev is not None:
            self._rev.cached.cache_clear()

    def __repr__(self) -> str:
        return f"<Rule {self._fwd.signature()}>"


# Filled as the rule families (``spmdrules.rules``) import: the top package imports them, so every
# rule is registered before any module of spmdrules can be used.
_RULES: OpTable[Rule] = OpTable("rule")
#: the table itself, for the registration of a whole op (``spmdrules.register_op``)
RULES: Final = _RULES
_lookup: Final = _RULES.lookup


def register_rule(
    name: str,
    *,
    forward: RuleFn,
    reverse: RuleFn | None = None,
    inputs: Sequence[TensorParam],
    outputs: Sequence[TensorParam],
    attrs: Sequence[AttrParam] = (),
    reverse_attrs: Sequence[AttrParam] | None = None,
    aliases: Sequence[str] = (),
    family: str | None = None,
    doc: str = "",
    op_attrs: Sequence[AttrParam] = (),
    masks: bool = False,
    origin: str | None = None,
) -> Rule:
    """Register a rule under ``name`` and each alias. Names must be new: a second rule for one
    raises ``DuplicateRegistrationError`` naming where each came from (``origin``, by default the
    caller's file and line).

    ``masks``: the forward rule takes masked pending sums (``spmdrules.engine.masks``); other
    rules see them unmasked.
    ``op_attrs`` are the op's attributes beyond the rule's (Paddle's op definition has them, its
    SPMD rule does not): a graph op carries them for shape inference and the kernel.
    ``family`` defaults to the name of the calling module (``spmdrules.rules.softmax`` gives
    ``softmax``): a family has one module of that name in every layer.
    """
    if family is None:
        family = sys._getframe(1).f_globals.get("__name__", "").rsplit(".", 1)[-1]  # noqa: SLF001 -- the caller's module
    rule = Rule(
        name,
        forward=forward,
        reverse=reverse,
        inputs=inputs,
        outputs=outputs,
        attrs=attrs,
        reverse_attrs=reverse_attrs,
        aliases=aliases,
        family=family,
        doc=doc,
        op_attrs=op_attrs,
        masks=masks,
    )
    _RULES.add_all((name, *aliases), rule, origin if origin is not None else caller(1))
    return rule


def get_rule(name: str) -> Rule:
    """The rule registered under ``name`` (or an alias). Unknown names raise UnknownOpError."""
    rule = _lookup(name)
    if rule is None:
        if not isinstance(name, str):
            raise UnknownOpError(repr(name), [])
        raise UnknownOpError(name, difflib.get_close_matches(name, list(_RULES), n=3, cutoff=0.6))
    return rule


def list_rules() -> list[str]:
    """Every registered name, aliases included, sorted."""
    return sorted(_RULES)
