"""Every registered op as a function on tensor handles: ``ops.matmul(x, w, trans_y=True)``.

The functions are made from the rule registry on first use, so their argument names, order and
defaults are the rules' (Paddle's C++ names): tensors first, then attributes, by position or
keyword. ``name=`` names the op node. An op with one result returns its handle (a tuple for a
list result such as split's); an op with several results returns a tuple (layer_norm gives
``(out, mean, variance)``). The generic rules (``default_data_parallel``, ``default_``,
``replicated``) take ``outs=[(shape, dtype), ...]`` since no shape inference can know them.

The op is added to the graph of its operands, which must be the graph of the enclosing
``with Graph():`` block if there is one.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Sequence
from typing import Any

from spmdrules.core.errors import did_you_mean
from spmdrules.graph.errors import (
    ArityError,
    GraphContextError,
    GraphUnknownOpError,
    OpAttributeError,
)
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, OwnerGraph, Tensor
from spmdrules.graph.opschema import OpSchema, graph_op_names, op_schema

_RESERVED = frozenset({"names", "call"})


class OpFunction:
    """``ops.<name>``: builds one op node per call and returns its result handles."""

    def __init__(self, op_type: str) -> None:
        schema = op_schema(op_type, f"ops.{op_type}")
        self.op_type = op_type
        self.schema = schema
        self.__name__ = op_type
        self.__qualname__ = f"ops.{op_type}"
        self.__doc__ = _doc(schema)
        self.__signature__ = _signature(schema)

    def __call__(self, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
        op = call(self.op_type, *args, name=name, **kwargs)
        return _returned(op)

    def __repr__(self) -> str:
        return f"<op function {self.schema.signature()}>"


def call(op_type: str, *args: Any, name: str | None = None, **kwargs: Any) -> Op:
    """Add one op, binding Python arguments like the ``ops.<name>`` functions; returns the Op."""
    schema = op_schema(op_type, name or f"ops.{op_type}")
    where = f"ops.{op_type}" + (f"(name={name!r})" if name else "")
    n_t = len(schema.inputs)
    all_attrs = (*schema.attrs, *schema.op_attrs)
    n_all = n_t + len(all_attrs)
    if len(args) > n_all:
        raise ArityError(
            f"{where}: takes {n_all} arguments ({schema.signature()}) but {len(args)} were given"
        )
    operands: list[Any] = list(args[:n_t]) + [_UNSET] * (n_t - min(len(args), n_t))
    attrs: dict[str, Any] = {a.name: v for a, v in zip(all_attrs, args[n_t:], strict=False)}
    outs = kwargs.pop("outs", None) if schema.generic else None
    t_index = {p.name: i for i, p in enumerate(schema.inputs)}
    for k, v in kwargs.items():
        if k in t_index:
            if operands[t_index[k]] is not _UNSET:
                raise ArityError(f"{where}: tensor argument {k!r} is given twice")
            operands[t_index[k]] = v
        elif k in schema.attr_index or k in schema.op_attr_index:
            if k in attrs:
                raise ArityError(f"{where}: attribute {k!r} is given twice")
            attrs[k] = v
        else:
            known = [*t_index, *schema.all_attr_names()]
            hint = did_you_mean(k, known)
            valid = ", ".join(schema.all_attr_names()) or "none"
            raise OpAttributeError(
                f"{where}: unknown argument {k!r}{hint} The valid attributes are: {valid} "
                f"({schema.signature()})"
            )
    for i, p in enumerate(schema.inputs):
        if operands[i] is _UNSET:
            if p.kind != "optional":
                raise ArityError(
                    f"{where}: missing tensor argument {p.name!r} ({schema.signature()})"
                )
            operands[i] = None
    g = _graph_of(where, operands)
    metas = None if outs is None else _out_metas(where, outs, operands)
    if schema.generic and metas is None:
        raise ArityError(
            f"{where}: a generic rule cannot infer its results; pass outs=[(shape, dtype), ...]"
        )
    return g.add_op(op_type, operands, attrs, name=name, result_metas=metas)


def _graph_of(where: str, operands: Sequence[Any]) -> OwnerGraph:
    found: OwnerGraph | None = None
    for v in operands:
        for t in v if isinstance(v, list | tuple) else (v,):
            if isinstance(t, Tensor):
                if found is None:
                    found = t.graph
                elif t.graph is not found:
                    raise GraphContextError(
                        f"{where}: operands come from graphs {found.name!r} and {t.graph.name!r}; "
                        "build each op on tensors of one graph"
                    )
    active = Graph.current()
    if found is None:
        if active is None:
            raise GraphContextError(
                f"{where}: no operand is a graph tensor and no graph is active; build ops inside "
                "`with Graph() as g:` on tensors made by g.input(...) / g.param(...)"
            )
        return active
    if active is not None and active is not found:
        raise GraphContextError(
            f"{where}: the operands belong to graph {found.name!r} but graph {active.name!r} is "
            "active; build the op inside its operands' graph"
        )
    return found


def _out_metas(where: str, outs: Any, operands: Sequence[Any]) -> list[tuple[Sequence[int], str]]:
    first = next((t for v in operands for t in (v if isinstance(v, list | tuple) else (v,))
                  if isinstance(t, Tensor)), None)
    default = first.dtype if first is not None else "float32"
    if isinstance(outs, str) or not isinstance(outs, Sequence):
        raise ArityError(f"{where}: outs must be a list of (shape, dtype) or shapes, got {outs!r}")
    metas: list[tuple[Sequence[int], str]] = []
    for o in outs:
        if (isinstance(o, tuple) and len(o) == 2 and isinstance(o[1], str)
                and isinstance(o[0], Sequence)):
            metas.append((o[0], o[1]))
        elif isinstance(o, Sequence) and not isinstance(o, str):
            metas.append((o, default))
        else:
            raise ArityError(f"{where}: outs entry {o!r} is not a shape or (shape, dtype)")
    return metas


def _returned(op: Op) -> Any:
    if len(op.results) == 1:
        return op.results[0]
    return op.results


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


def _doc(schema: OpSchema) -> str:
    rule = schema.rule
    outs = ", ".join(p.name + ("[...]" if p.kind == "list" else "") for p in schema.outputs)
    head = f"{schema.signature()} -> {outs}"
    return f"{head}\n\n{rule.doc}" if rule.doc else head


def _signature(schema: OpSchema) -> inspect.Signature:
    P = inspect.Parameter
    params = [
        P(p.name, P.POSITIONAL_OR_KEYWORD, default=None if p.kind == "optional" else P.empty)
        for p in schema.inputs
    ]
    named = [a for a in (*schema.attrs, *schema.op_attrs) if not keyword.iskeyword(a.name)]
    params += [P(a.name, P.POSITIONAL_OR_KEYWORD, default=a.default) for a in named]
    if schema.generic:
        params.append(P("outs", P.KEYWORD_ONLY))
    params.append(P("name", P.KEYWORD_ONLY, default=None))
    if len(named) < len(schema.attrs) + len(schema.op_attrs):
        # Paddle names some attributes with Python keywords (mish's ``lambda``): **{"lambda": v}
        params.append(P("attrs", P.VAR_KEYWORD))
    return inspect.Signature(params)


_FUNCS: dict[str, OpFunction] = {}


def names() -> list[str]:
    """Every op callable as ``ops.<name>`` (registered names except ``<op>_grad`` rules)."""
    return graph_op_names()


def __getattr__(attr: str) -> OpFunction:
    f = _FUNCS.get(attr)
    if f is not None:
        return f
    if attr.startswith("__") or attr in _RESERVED:
        raise AttributeError(attr)
    try:
        f = OpFunction(attr)
    except GraphUnknownOpError as e:  # an AttributeError too, so hasattr() and dir() behave
        raise UnknownOpAttributeError(f"ops.{attr}", attr, e.suggestions) from None
    _FUNCS[attr] = f
    return f


class UnknownOpAttributeError(GraphUnknownOpError, AttributeError):  # type: ignore[misc]
    """``ops.<unknown>``: a typed unknown-op error that is also an AttributeError."""


def __dir__() -> list[str]:
    return sorted({*globals(), *names()})
