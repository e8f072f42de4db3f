"""Binding one op before the graph adds it: operands, result shapes and result names, checked.

``Graph.add_op`` runs every check here before it changes the graph, so a failed call leaves the
graph as it was. Names, shapes and dtypes of declared tensors are checked here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from spmdrules.core.errors import did_you_mean
from spmdrules.graph.errors import (
    ArityError,
    DuplicateNameError,
    GraphContextError,
    InvalidNameError,
    ProducerError,
    ShapeError,
)
from spmdrules.graph.nodes import OwnerGraph, Tensor, tensor_meta
from spmdrules.graph.opschema import OpSchema
from spmdrules.graph.shapes.shape_rule import DTYPES, Arg, OutMeta, TensorMeta, infer_meta

NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/:\[\]]*")

#: an op bound: the rule's attribute values, the op's further ones, the result metas as the
#: shape rule gives them (a tuple for a list result) and flat
Bound = tuple[tuple[Any, ...], tuple[Any, ...], tuple[OutMeta, ...], tuple[TensorMeta, ...]]

#: ops bound before, by schema, operand shapes and dtypes, and attributes with their types (so
#: that ``0.0`` never answers for ``False``): the layers of a model repeat, and binding them
#: again would give the same answer. Only successes are kept, so every error names its own op.
_BOUND: dict[Any, Bound] = {}
_BOUND_MAX: Final = 4096


def check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):  # "x\n" is not a name
        raise InvalidNameError(
            f"{what} name {name!r} is not a valid name; use letters, digits and _ . - / : [ ] "
            "(a module path such as 0.weight is fine)"
        )


def check_shape(name: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, str | bytes) or not isinstance(shape, Iterable):
        raise ShapeError(f"tensor {name!r}: shape must be a list of ints, got {shape!r}")
    out: list[int] = []
    for i, n in enumerate(shape):
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise ShapeError(f"tensor {name!r}: dim {i} is {n!r}, not an int; give sizes as ints")
        v = int(n)
        if v < 0:
            raise ShapeError(f"tensor {name!r}: dim {i} is {v}; sizes are >= 0")
        out.append(v)
    return tuple(out)


def check_dtype(name: str, dtype: Any) -> str:
    d = str(dtype)
    if d not in DTYPES:
        hint = did_you_mean(d, sorted(DTYPES))
        raise ShapeError(
            f"tensor {name!r}: dtype {dtype!r} is not one of {sorted(DTYPES)}{hint}"
        )
    return d


def _resolve(graph: OwnerGraph, node: str, param: str, v: Any) -> Tensor:
    if isinstance(v, Tensor):
        if v.graph is not graph:
            raise GraphContextError(
                f"op {node!r}: operand {param!r} is tensor {v.name!r} of graph "
                f"{v.graph.name!r}, not of graph {graph.name!r}; build each op in the graph "
                "of its operands"
            )
        return v
    if isinstance(v, str):
        return graph.tensor(v)
    raise ArityError(
        f"op {node!r}: operand {param!r} must be a tensor of the graph (or its name), got "
        f"{type(v).__name__} {v!r}"
    )


#: the sequences checked by type alone (the ABC check costs more than the rest of a small op)
_PLAIN_SEQUENCES: Final = (list, tuple)


def bind_operands(
    graph: OwnerGraph, name: str, schema: OpSchema, operands: Sequence[Any]
) -> tuple[Tensor | tuple[Tensor, ...] | None, ...]:
    if type(operands) not in _PLAIN_SEQUENCES and (
            isinstance(operands, str | Tensor) or not isinstance(operands, Sequence)):
        raise ArityError(
            f"op {name!r} ({schema.name}): operands must be a list with one entry per tensor "
            f"parameter; the signature is {schema.signature()}"
        )
    params = schema.inputs
    if len(operands) > len(params):
        raise ArityError(
            f"op {name!r} ({schema.name}): takes {len(params)} tensor operand(s) but "
            f"{len(operands)} were given; the signature is {schema.signature()}"
        )
    out: list[Tensor | tuple[Tensor, ...] | None] = []
    for i, p in enumerate(params):
        v = operands[i] if i < len(operands) else None
        if p.kind == "list":
            if not isinstance(v, _PLAIN_SEQUENCES) and (
                    isinstance(v, Tensor | str) or not isinstance(v, Sequence)):
                raise ArityError(
                    f"op {name!r} ({schema.name}): operand {p.name!r} is a list of tensors; "
                    f"pass a list, got {v!r}"
                )
            out.append(tuple(_resolve(graph, name, f"{p.name}[{j}]", e) for j, e in enumerate(v)))
        elif v is None:
            if p.kind != "optional":
                raise ArityError(
                    f"op {name!r} ({schema.name}): missing tensor operand {p.name!r}; the "
                    f"signature is {schema.signature()}"
                )
            out.append(None)
        else:
            out.append(_resolve(graph, name, p.name, v))
    return tuple(out)


def bind_op(
    name: str,
    schema: OpSchema,
    ops_in: tuple[Tensor | tuple[Tensor, ...] | None, ...],
    attrs: Mapping[str, Any] | None,
    result_metas: Sequence[tuple[Sequence[int], str]] | None,
) -> Bound:
    """Check the attributes and infer the results of one op (``Graph.add_op``'s checks)."""
    key = None if result_metas is not None else _bound_key(schema, ops_in, attrs)
    if key is not None:
        try:
            hit = _BOUND.get(key)
        except TypeError:  # an unhashable attribute value: bind it afresh
            key = hit = None
        if hit is not None:
            return hit
    values, extra = schema.bind_attrs(name, attrs)
    attr_map = dict(zip((a.name for a in schema.attrs), values, strict=True))
    attr_map.update(zip((a.name for a in schema.op_attrs), extra, strict=True))
    metas = infer_metas(name, schema, ops_in, attr_map, result_metas)
    flat = tuple(m for ms in metas for m in ((ms,) if isinstance(ms, TensorMeta) else ms))
    bound = (values, extra, metas, flat)
    if key is not None:
        if len(_BOUND) >= _BOUND_MAX:
            _BOUND.clear()
        _BOUND[key] = bound
    return bound


def _bound_key(
    schema: OpSchema, ops_in: tuple[Tensor | tuple[Tensor, ...] | None, ...], attrs: Any
) -> tuple[Any, ...] | None:
    if attrs is None:
        given: tuple[Any, ...] = ()
    elif isinstance(attrs, dict):
        given = tuple((k, _typed(v)) for k, v in attrs.items())
    else:
        return None
    metas: list[Any] = []
    for v in ops_in:
        if isinstance(v, Tensor):
            metas.append(tensor_meta(v))
        else:
            metas.append(None if v is None else tuple(tensor_meta(t) for t in v))
    return schema, tuple(metas), given


def _typed(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return type(v), tuple(_typed(x) for x in v)
    return type(v), v


def infer_metas(
    name: str,
    schema: OpSchema,
    ops_in: tuple[Tensor | tuple[Tensor, ...] | None, ...],
    attr_map: Mapping[str, Any],
    result_metas: Sequence[tuple[Sequence[int], str]] | None,
) -> tuple[OutMeta, ...]:
    if schema.generic:
        if result_metas is None:
            raise ArityError(
                f"op {name!r} ({schema.name}): a generic rule cannot infer result shapes; "
                "pass result_metas=[(shape, dtype), ...] (ops.<name>(..., outs=[...]))"
            )
        declared = tuple(
            TensorMeta(check_shape(f"{name} result {i}", s), check_dtype(f"{name} result {i}", d))
            for i, (s, d) in enumerate(result_metas)
        )
        return (declared,)
    if result_metas is not None:
        raise ArityError(
            f"op {name!r} ({schema.name}): result_metas is only for generic rules; "
            f"{schema.name} infers its own result shapes"
        )
    args: list[Arg] = []
    for v in ops_in:
        if isinstance(v, Tensor):
            args.append(TensorMeta(v.shape, v.dtype))
        elif v is None:
            args.append(None)
        else:
            args.append(tuple(TensorMeta(t.shape, t.dtype) for t in v))
    metas = infer_meta(schema.name, args, attr_map, node=name)
    if len(metas) != len(schema.outputs):
        raise AssertionError(f"{schema.name}: shape rule and registered outputs disagree")
    return metas


def result_names(
    name: str, schema: OpSchema, metas: tuple[OutMeta, ...], results: Sequence[str] | None,
    n_flat: int,
) -> list[str]:
    """The flat results' names (``n_flat`` of them): the given ones, checked, or the defaults."""
    if results is not None and len(results) == n_flat == 1 and not isinstance(results, str):
        check_name(results[0], "tensor")  # the common case, one result named
        return [results[0]]
    if results is not None:
        if isinstance(results, str) or len(results) != n_flat:
            raise ArityError(
                f"op {name!r} ({schema.name}): results names {results!r} but the op has "
                f"{n_flat} result(s); give one name per result"
            )
        names = list(results)
    else:
        names = []
        single = len(metas) == 1
        for p, m in zip(schema.outputs, metas, strict=True):
            base = name if single else f"{name}.{p.name}"
            if isinstance(m, TensorMeta):
                names.append(base)
            else:
                names.extend(f"{base}.{i}" for i in range(len(m)))
    seen: set[str] = set()
    for r in names:
        check_name(r, "tensor")
        if r in seen:
            raise DuplicateNameError(f"op {name!r}: result name {r!r} is given twice")
        seen.add(r)
    return names


def adopted_results(
    tensors: Mapping[str, Tensor], name: str, names: list[str], metas: Sequence[TensorMeta]
) -> dict[str, Tensor]:
    adopt: dict[str, Tensor] = {}
    for k, r in enumerate(names):
        t = tensors.get(r)
        if t is None:
            continue
        if t.role != "value":
            raise ProducerError(
                f"op {name!r}: result {r!r} is a graph {t.role}, which no op may produce; "
                "name the result differently"
            )
        if t.producer is not None:
            raise DuplicateNameError(
                f"op {name!r}: result {r!r} is already produced by op {t.producer.name!r}; "
                "each tensor has one producer, so name the result differently"
            )
        check_declared(name, r, t.shape, t.dtype, metas[k].shape, metas[k].dtype)
        adopt[r] = t
    return adopt


def check_declared(
    op: str, result: str, shape: Sequence[int], dtype: str, made_shape: tuple[int, ...],
    made_dtype: str,
) -> None:
    """A result declared ``shape`` ``dtype`` (a declared tensor, a model file's entry) is what
    op ``op`` makes."""
    if tuple(shape) != made_shape or dtype != made_dtype:
        raise ShapeError(
            f"op {op!r}: result {result!r} was declared {list(shape)} {dtype} but the op "
            f"produces {list(made_shape)} {made_dtype}; fix the declaration or the op's inputs"
        )
