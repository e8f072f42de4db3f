"""The calling convention of a graph op, read from its registered Rule.

The graph, the ``ops`` functions and the completion pass all take argument names, kinds and
attribute defaults from here, so they can never disagree with the rules: a rule is the schema.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from spmdrules.core.errors import UnknownOpError, did_you_mean
from spmdrules.engine.attributes import INVALID, coerce_attr
from spmdrules.engine.attributes import TYPE_WORDS as _TYPE_WORDS
from spmdrules.engine.registry import AttrParam, Rule, TensorParam, get_rule, list_rules
from spmdrules.graph.errors import GraphUnknownOpError, OpAttributeError
from spmdrules.graph.shapes.shape_rule import GENERIC_OPS


def is_graph_op_name(name: str) -> bool:
    """Gradient rules (``<op>_grad``) score a backward step; they are not ops of a model graph."""
    return not name.endswith("_grad")


class OpSchema:
    """One op's graph signature: tensor operands, results and attributes, in Paddle's order.

    For the generic rules (``default_data_parallel``, ``default_``, ``replicated``) the rule takes
    the op's results as a second tensor list (``outs``); here they are results whose shapes the
    caller declares, and ``generic`` is True so the completion pass passes them back to the rule.
    """

    __slots__ = (
        "attr_index", "attrs", "generic", "inputs", "name", "op_attr_index", "op_attrs", "outputs",
        "reverse_attrs", "rule",
    )

    name: str
    rule: Rule
    inputs: tuple[TensorParam, ...]
    outputs: tuple[TensorParam, ...]
    attrs: tuple[AttrParam, ...]
    attr_index: dict[str, int]
    op_attrs: tuple[AttrParam, ...]
    op_attr_index: dict[str, int]
    generic: bool
    reverse_attrs: tuple[AttrParam, ...] | None

    def __init__(self, name: str, rule: Rule) -> None:
        self.name = name
        self.rule = rule
        ins = rule.inputs
        self.generic = name in GENERIC_OPS or (
            len(ins) >= 2 and ins[-1].name == "outs" and ins[-1].kind == "list"
        )
        if self.generic:
            self.inputs = ins[:-1]
            self.outputs = (ins[-1],)
        else:
            self.inputs = ins
            self.outputs = rule.outputs
        self.attrs = rule.attrs
        self.attr_index = {a.name: i for i, a in enumerate(self.attrs)}
        # The op's attributes beyond its rule's (scale's factor, clip's bounds): shape inference and
        # the kernel read them, the rule never sees them.
        self.op_attrs = rule.op_attrs
        self.op_attr_index = {a.name: i for i, a in enumerate(self.op_attrs)}
        # A reverse rule may take fewer attributes than the forward one (reduce_base drops
        # reduce_type); the registry keeps them on the reverse binding.
        self.reverse_attrs = rule.reverse_attrs

    def reverse_attr_values(self, forward_values: tuple[Any, ...]) -> tuple[Any, ...]:
        """The reverse rule's positional attributes, from the forward values an Op stores:
        ``rule.infer_reverse(*inputs, *outputs, *schema.reverse_attr_values(op.attrs))``."""
        if self.reverse_attrs is None:
            return ()
        if self.reverse_attrs == self.attrs:
            return forward_values
        out = []
        for a in self.reverse_attrs:
            i = self.attr_index.get(a.name)
            out.append(a.default if i is None else forward_values[i])
        return tuple(out)

    def signature(self) -> str:
        parts = [
            f"[{p.name}...]" if p.kind == "list" else (f"{p.name}=None" if p.kind == "optional" else p.name)
            for p in self.inputs
        ]
        parts += [f"{a.name}={a.default!r}" for a in (*self.attrs, *self.op_attrs)]
        return f"{self.name}({', '.join(parts)})"

    def all_attr_names(self) -> list[str]:
        return [a.name for a in (*self.attrs, *self.op_attrs)]

    def bind_attrs(
        self, node: str, given: Mapping[str, Any] | None
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Check attribute names and types: the rule's values in its order and the op's further
        attributes (``op_attrs``) in theirs, defaults filled.

        The first tuple is what the rule takes positionally after the tensors, so the completion
        pass can call ``rule.infer_forward(*specs, *op.attrs)`` on the rule's memoised fast path.
        """
        values = [a.default for a in self.attrs]
        extra = [a.default for a in self.op_attrs]
        if given is not None and not isinstance(given, Mapping):
            raise OpAttributeError(
                f"op {node!r} ({self.name}): attributes must be a mapping of name to value, got "
                f"{type(given).__name__}; the signature is {self.signature()}"
            )
        if given:
            for k, v in given.items():
                i = self.attr_index.get(k)
                if i is not None:
                    values[i] = _check_attr(node, self.name, self.attrs[i], v)
                    continue
                j = self.op_attr_index.get(k)
                if j is None:
                    hint = did_you_mean(k, self.all_attr_names())
                    valid = ", ".join(self.all_attr_names()) or "none"
                    raise OpAttributeError(
                        f"op {node!r} ({self.name}): unknown attribute {k!r}{hint} The valid "
                        f"attributes are: {valid}; the signature is {self.signature()}"
                    )
                extra[j] = _check_attr(node, self.name, self.op_attrs[j], v)
        for a, v in zip(self.attrs, values, strict=True):
            if v is None and a.type in ("ints", "floats"):
                raise OpAttributeError(
                    f"op {node!r} ({self.name}): attribute {a.name!r} is required "
                    f"({_TYPE_WORDS[a.type]}); the signature is {self.signature()}"
                )
        return tuple(values), tuple(extra)

    def __reduce__(self) -> tuple[Any, ...]:
        # rules hold memo caches that cannot be pickled; a schema is its name in the registry
        return (op_schema, (self.name,))

    def __repr__(self) -> str:
        return f"<OpSchema {self.signature()}>"


def _check_attr(node: str, op: str, p: AttrParam, v: Any) -> Any:
    ok = coerce_attr(p, v)
    if ok is INVALID:
        raise OpAttributeError(
            f"op {node!r} ({op}): attribute {p.name!r} must be {_TYPE_WORDS[p.type]}, got {v!r}"
        )
    return ok


_CACHE: dict[str, OpSchema] = {}


def op_schema(op_type: str, node: str = "?") -> OpSchema:
    """The schema of a graph op; an unknown or gradient name raises GraphUnknownOpError."""
    s = _CACHE.get(op_type)
    if s is not None:
        return s
    if not isinstance(op_type, str):
        raise GraphUnknownOpError(node, repr(op_type), [], "an op type is a str")
    if not is_graph_op_name(op_type):
        base = op_type[: -len("_grad")]
        raise GraphUnknownOpError(
            node, op_type, [base] if base in list_rules() else [],
            "it is a gradient rule, which scores a backward step, not an op of a model graph",
        )
    try:
        rule = get_rule(op_type)
    except UnknownOpError as e:
        names = [n for n in list_rules() if is_graph_op_name(n)]
        close = difflib.get_close_matches(op_type, names, n=3, cutoff=0.6)
        raise GraphUnknownOpError(node, op_type, close or e.suggestions) from None
    s = OpSchema(op_type, rule)
    _CACHE[op_type] = s
    return s


def graph_op_names() -> list[str]:
    """Every registered name (aliases included) that can be a graph op, sorted."""
    return [n for n in list_rules() if is_graph_op_name(n)]
