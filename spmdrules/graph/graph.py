"""The Graph IR: ops and tensors in a networkx DiGraph, validated as it is built.

The nodes, ``Tensor`` and ``Op``, are in ``spmdrules.graph.nodes``.

Design. Ops and tensors are slotted objects that link each other: ``Op.operands`` and
``Op.results`` keep the rule's argument order, ``Tensor.producer`` is the op that makes a tensor
and each tensor keeps the ops that read it. Tensors are nodes of their own (not edge labels):
a tensor has one producer but many consumers, sources have none, and completion keeps one
attribute per tensor, not per use. A 200k-op model costs about 100 MB this way; ``Graph.nx``,
the bipartite networkx DiGraph (tensor -> op per operand, op -> tensor per result), is built
when asked for, and networkx runs the topological sort and the search for a cycle. Attributes
set for every tensor at once (``set_attrs``, ``reset_attrs``) stay in one list on the graph
until one tensor's attribute is set or the graph changes: a write into each scattered Tensor
costs a cache miss per tensor on large models.

Order. ``Graph.topological_order()`` puts each op after the producers of its operands and as
late as it can come (right before its first reader, so a model's layers stay contiguous), ties
broken by natural name order with the name itself last: a total order, so it depends on the
graph's content only, never on insertion order (``spmdrules.graph.order``; networkx sorts only
when the ops sorted by that key are not already in topological order). The order is cached,
each op's position kept in ``Op.order``; consumers are sorted by it.

The graph keeps its annotated tensors (``Tensor.annotation`` tells it) and a count of declared
tensors no op produces yet, so neither completion nor ``validate`` visits every tensor.

Validation. ``add_op`` checks the op type, arity, attributes and shapes (``binding``, with the
shape rules of ``shapes``) before it touches the graph, so a failed call changes nothing. Cycles
can only arise when an op adopts a declared tensor that is already consumed (``remove_op`` makes
such tensors of a rewritten op's results); ``validate()`` finds them, and runs when a
``with Graph():`` block ends.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import did_you_mean
from spmdrules.core.spec import flat_slots
from spmdrules.graph.annotation import Annotation
from spmdrules.graph.binding import (
    adopted_results,
    bind_op,
    bind_operands,
    check_dtype,
    check_name,
    check_shape,
    infer_metas,
    result_names,
)
from spmdrules.graph.errors import (
    ArityError,
    DuplicateNameError,
    ProducerError,
    ShapeError,
    UnknownNodeError,
    UnknownTensorError,
)
from spmdrules.graph.nodes import Op, Role, Tensor
from spmdrules.graph.opschema import op_schema
from spmdrules.graph.order import bipartite_view, lexicographic_order, natural_key
from spmdrules.graph.shapes.shape_rule import TensorMeta

if TYPE_CHECKING:  # networkx loads with the first view or unsorted graph, not in every MPI rank
    import networkx as nx

_op_order = _tensor_order = attrgetter("order")
_CURRENT: contextvars.ContextVar[tuple[Graph, ...]] = contextvars.ContextVar(
    "spmdrules_graph_stack", default=()
)


class Graph:
    """A model graph. Build it with ops on tensor handles inside ``with Graph() as g:``.

    >>> from spmdrules import ops
    >>> with Graph("tiny") as g:
    ...     x = g.input("x", [8, 16])
    ...     w = g.param("w", [16, 4])
    ...     y = ops.relu(ops.matmul(x, w))
    >>> y.shape, g.num_ops
    ((8, 4), 2)
    """

    __slots__ = (
        "_annotated", "_auto", "_derived", "_nx", "_ops", "_tensor_order", "_tensors", "_topo",
        "_unproduced", "attrs_in_order", "name",
    )
    __hash__ = None  # type: ignore[assignment]  # compares by content, so not hashable

    name: str
    _nx: nx.DiGraph | None
    _tensors: dict[str, Tensor]
    _ops: dict[str, Op]
    _topo: tuple[Op, ...] | None
    _tensor_order: tuple[Tensor, ...] | None
    _auto: int
    _annotated: dict[Tensor, Annotation]
    _unproduced: int
    #: the attributes set at once (``set_attrs``), in ``tensors`` order; None once stored. A
    #: plain slot, not a property: every ``Tensor.attr`` read on completion's hot path reads it
    attrs_in_order: list[DistAttr | None] | None
    #: values that higher layers derive from the topology (completion's index), by key: kept
    #: with the graph, so they go when it goes, and dropped when it changes
    _derived: dict[str, Any]

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nx = None  # the networkx view, built when asked for
        self._derived = {}
        self._tensors = {}
        self._ops = {}
        self._topo = None
        self._tensor_order = None
        self._auto = 0
        self._annotated = {}  # the tensors with an annotation (kept by Tensor.annotation)
        self._unproduced = 0  # declared tensors no op produces yet (what validate() reports)
        self.attrs_in_order = None  # the attributes set all at once: the module's docstring says why

    # ---- context --------------------------------------------------------------------------------
    def __enter__(self) -> Graph:
        _CURRENT.set((*_CURRENT.get(), self))
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        stack = _CURRENT.get()
        if stack and stack[-1] is self:
            _CURRENT.set(stack[:-1])
        if exc_type is None:
            self.validate()

    @staticmethod
    def current() -> Graph | None:
        """The innermost graph of an enclosing ``with Graph():`` block, if any."""
        stack = _CURRENT.get()
        return stack[-1] if stack else None

    # ---- tensors -------------------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        """A graph input (data fed to the model): a source tensor."""
        return self._new_tensor(name, shape, dtype, "input")

    def param(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        """A parameter (weight, bias, table): a source tensor the model owns."""
        return self._new_tensor(name, shape, dtype, "param")

    def declare(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        """A tensor that an op added later will produce (``add_op(..., results=[name])``):
        loaders and out-of-order builders declare every tensor, then add ops in any order."""
        return self._new_tensor(name, shape, dtype, "value")

    def _new_tensor(self, name: str, shape: Sequence[int], dtype: str, role: Role) -> Tensor:
        check_name(name, "tensor")
        if name in self._tensors:
            raise DuplicateNameError(
                f"tensor {name!r} already exists in graph {self.name!r}; give the new tensor "
                "another name"
            )
        t = Tensor(self, name, check_shape(name, shape), check_dtype(name, dtype), role)
        self.invalidate()
        self._tensors[name] = t
        if role == "value":
            self._unproduced += 1
        return t

    def tensor(self, name: str) -> Tensor:
        t = self._tensors.get(name)
        if t is None:
            hint = did_you_mean(name, self._tensors, n=3)
            raise UnknownTensorError(f"graph {self.name!r} has no tensor {name!r}{hint}")
        return t

    def op(self, name: str) -> Op:
        o = self._ops.get(name)
        if o is None:
            hint = did_you_mean(name, self._ops, n=3)
            raise UnknownNodeError(f"graph {self.name!r} has no op {name!r}{hint}")
        return o


    # ---- ops ----------------------------------------------------------------------------------
    def add_op(
        self,
        op_type: str,
        operands: Sequence[Any],
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        results: Sequence[str] | None = None,
        result_metas: Sequence[tuple[Sequence[int], str]] | None = None,
    ) -> Op:
        """Add one op: ``operands`` has one entry per tensor parameter of the op's rule (a tensor
        or its name, None for an absent optional, a list for a list parameter).

        ``results`` names the flat results (default ``<op>``, ``<op>.<i>`` or ``<op>.<output>``);
        a name of a declared tensor makes this op its producer, after checking its shape.
        ``result_metas`` gives (shape, dtype) per result of the generic rules
        (``default_data_parallel``, ``replicated``), whose results shape inference cannot know.
        Every check runs before the graph changes, so a failed call leaves it as it was.
        """
        node = name if name is not None else f"<{op_type}>"
        schema = op_schema(op_type, node)
        if name is None:
            name = self._auto_name(op_type)
        else:
            check_name(name, "op")
            if name in self._ops:
                raise DuplicateNameError(
                    f"op {name!r} already exists in graph {self.name!r}; give the new op another name"
                )
        ops_in = bind_operands(self, name, schema, operands)
        attr_values, extra, metas, flat_metas = bind_op(name, schema, ops_in, attrs, result_metas)
        names = result_names(name, schema, metas, results, len(flat_metas))
        adopt = adopted_results(self._tensors, name, names, flat_metas)

        self.invalidate()
        op = Op(name, schema, attr_values, ops_in, extra)
        for t in flat_slots(ops_in, Tensor):
            readers = t.readers
            if not readers or readers[-1] is not op:  # an op reading t twice reads it once
                readers.append(op)
        tensors = self._tensors
        flat: list[Tensor] = []
        for i, rname in enumerate(names):  # as many as flat_metas: result_names checks
            # an adopted tensor that already has consumers may close a cycle: validate() finds it
            old = adopt.get(rname) if adopt else None
            if old is None:
                meta = flat_metas[i]
                t = Tensor(self, rname, meta.shape, meta.dtype, "value")
                tensors[rname] = t
            else:
                t = old
                self._unproduced -= 1
            t.producer = op
            t.index = i
            flat.append(t)
        if len(flat) == len(metas):  # no list result: the structure is the flat list
            op.results = tuple(flat)
        else:
            structured: list[Tensor | tuple[Tensor, ...]] = []
            k = 0
            for ms in metas:
                if isinstance(ms, TensorMeta):
                    structured.append(flat[k])
                    k += 1
                else:
                    structured.append(tuple(flat[k : k + len(ms)]))
                    k += len(ms)
            op.results = tuple(structured)
        self._ops[name] = op
        return op

    def remove_op(self, op: Op | str) -> None:
        """Take ``op`` out for a rewrite: its results stay, with their readers, as declared
        tensors that the replacing ops produce (``add_op(..., results=[name])``)."""
        o = self.op(op) if isinstance(op, str) else op
        if self._ops.get(o.name) is not o:
            raise UnknownNodeError(f"op {o.name!r} is not an op of graph {self.name!r}")
        self.invalidate()
        for t in set(flat_slots(o.operands, Tensor)):  # an op reading t twice is listed once
            t.readers.remove(o)
        for t in o.outputs:
            t.producer, t.index = None, -1
            self._unproduced += 1
        del self._ops[o.name]

    def _auto_name(self, op_type: str) -> str:
        while True:
            name = f"{op_type}_{self._auto}"
            self._auto += 1
            if name not in self._ops and name not in self._tensors:
                return name


    # ---- queries ------------------------------------------------------------------------------
    @property
    def nx(self) -> nx.DiGraph:
        """The graph as a networkx DiGraph: Op and Tensor objects are its nodes, with an edge
        tensor -> op for each operand and op -> tensor for each result. Built on the first call
        and kept until the graph changes; read it, and change the graph through ``add_op``."""
        if self._nx is None:
            self._nx = bipartite_view(self._tensors.values(), self._ops.values())
        return self._nx

    @property
    def num_ops(self) -> int:
        return len(self._ops)

    @property
    def num_tensors(self) -> int:
        return len(self._tensors)

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every op in topological order (see ``topological_order``)."""
        return self.topological_order()

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor, sources first in name order, then results in op order; each tensor's
        position is in ``Tensor.order`` (dense ids for per-tensor arrays)."""
        self.topological_order()
        assert self._tensor_order is not None
        return self._tensor_order

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role == "input")

    @property
    def params(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role == "param")

    def annotated(self) -> tuple[Tensor, ...]:
        """The tensors that carry a user annotation, in ``tensors`` order."""
        self.topological_order()
        return tuple(sorted(self._annotated, key=_tensor_order))

    def annotations(self) -> list[tuple[int, Annotation]]:
        """(``Tensor.order``, annotation) of every annotated tensor, in no particular order."""
        self.topological_order()
        return [(t.order, ann) for t, ann in self._annotated.items()]

    def reset_attrs(self) -> Graph:
        """Forget every inferred attribute: annotated tensors go back to their annotation's
        seed, all others to None (so completion can run again from the annotations alone)."""
        if self._topo is None:  # no tensor order yet (or a cycle): tensor by tensor
            for t in self._tensors.values():
                t.hold_attr(None if (ann := t.annotation) is None else ann.attr)
            return self
        attrs: list[DistAttr | None] = [None] * len(self.tensors)
        for t, ann in self._annotated.items():
            attrs[t.order] = ann.attr
        self.attrs_in_order = attrs
        return self

    def set_attrs(self, attrs: Sequence[DistAttr | None]) -> Graph:
        """Set every tensor's attribute at once, one per tensor in ``tensors`` order."""
        if len(attrs) != len(self.tensors):
            raise ArityError(
                f"graph {self.name!r}: set_attrs got {len(attrs)} attributes for "
                f"{len(self.tensors)} tensors; give one per tensor, in Graph.tensors order"
            )
        self.attrs_in_order = list(attrs)
        return self

    def note_annotation(self, t: Tensor, ann: Annotation | None) -> None:
        if ann is None:
            self._annotated.pop(t, None)
        else:
            self._annotated[t] = ann

    @property
    def tensors_by_name(self) -> Mapping[str, Tensor]:  # a read-only view, in the added order
        return MappingProxyType(self._tensors)

    def store_attrs(self) -> None:
        """Write the all-at-once attributes into the tensors (before one changes or the tensor
        order does)."""
        attrs, self.attrs_in_order = self.attrs_in_order, None
        if attrs is not None:
            assert self._tensor_order is not None
            for t, a in zip(self._tensor_order, attrs, strict=True):
                t.hold_attr(a)

    def invalidate(self) -> None:
        """The graph's content changes: per-topology caches and the tensor order are stale."""
        self.store_attrs()
        self._topo = None
        self._nx = None
        self._derived.clear()

    def derived(self, key: str, make: Callable[[], Any]) -> Any:
        """The value a higher layer derives from this topology under ``key`` (``make()`` the
        first time, kept until the graph changes)."""
        value = self._derived.get(key)
        if value is None:
            value = self._derived[key] = make()
        return value

    def clear_derived(self) -> None:
        """Drop what higher layers derived from this topology, so that it is derived again (a
        benchmark times that)."""
        self._derived.clear()

    def producer(self, t: Tensor | str) -> Op | None:
        return (self.tensor(t) if isinstance(t, str) else t).producer

    def consumers(self, t: Tensor | str) -> tuple[Op, ...]:
        """The ops that read ``t``, each once, in topological order."""
        tt = self.tensor(t) if isinstance(t, str) else t
        readers = tt.readers
        if len(readers) <= 1:
            return tuple(readers)
        self.topological_order()
        return tuple(sorted(readers, key=_op_order))

    def topological_order(self) -> tuple[Op, ...]:
        """Ops in an order where every op comes after the producers of its operands, each as
        late as it can come (before its first reader).

        Ties are broken by natural name order, so the order is a function of the graph's content
        alone. Cached until the graph changes; each op's position is in ``Op.order``.
        """
        if self._topo is not None:
            return self._topo
        order = lexicographic_order(self._ops.values(), self.name)
        src = sorted((t for t in self._tensors.values() if t.producer is None),
                     key=lambda t: natural_key(t.name))
        tensors = (*src, *(t for op in order for t in flat_slots(op.results, Tensor)))
        for i, t in enumerate(tensors):
            t.order = i
        self._topo = order
        self._tensor_order = tensors
        return order

    def validate(self, *, full: bool = False) -> Graph:
        """Check that every non-source tensor has a producer and that there is no cycle; with
        ``full``, also re-run shape inference on every op against its tensors' shapes (for
        graphs whose tensors were changed after their ops were added)."""
        if self._unproduced:
            for t in self._tensors.values():
                if t.producer is None and t.role == "value":
                    raise ProducerError(
                        f"tensor {t.name!r} was declared but no op produces it; add its "
                        "producing op, or make it a source with g.input(...) / g.param(...)"
                    )
        self.topological_order()
        if full:
            for op in self.topological_order():
                if op.schema.generic:
                    continue
                metas = infer_metas(op.name, op.schema, op.operands, op.attr_dict, None)
                flat = [m for ms in metas for m in (ms if not isinstance(ms, TensorMeta) else (ms,))]
                for t, m in zip(op.outputs, flat, strict=True):
                    if t.shape != m.shape or t.dtype != m.dtype:
                        raise ShapeError(
                            f"op {op.name!r}: result {t.name!r} is {list(t.shape)} {t.dtype} but "
                            f"the op produces {list(m.shape)} {m.dtype}; fix the tensor or the op"
                        )
        return self

    # ---- identity ---------------------------------------------------------------------------
    def canonical(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The graph's content, independent of insertion order: what ``==`` compares."""
        def ann(t: Tensor) -> Any:
            return None if t.annotation is None else t.annotation.key()

        tensors = tuple(sorted(
            (t.name, t.shape, t.dtype, t.role, t.attr, ann(t), t.storage)
            for t in self._tensors.values()
        ))

        def names(v: Tensor | tuple[Tensor, ...] | None) -> Any:
            if v is None or isinstance(v, Tensor):
                return None if v is None else v.name
            return tuple(t.name for t in v)

        ops = tuple(sorted(
            (o.name, o.type, o.attrs, o.extra, tuple(names(v) for v in o.operands),
             tuple(names(v) for v in o.results))
            for o in self._ops.values()
        ))
        return tensors, ops

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return self.canonical() == other.canonical()

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._tensors or item in self._ops
        if isinstance(item, Tensor):
            return self._tensors.get(item.name) is item
        if isinstance(item, Op):
            return self._ops.get(item.name) is item
        return False

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {self.num_ops} ops, {self.num_tensors} tensors, "
                f"{sum(1 for t in self._tensors.values() if t.annotation is not None)} annotated)")

    def summary(self) -> str:
        """One line per op in topological order: results, op type, operands."""
        lines = [repr(self)]
        for op in self.topological_order():
            outs = ", ".join(f"{t.name}{list(t.shape)}" for t in op.outputs)
            lines.append(f"  {outs} = {op.type}({', '.join(t.name for t in op.inputs)})")
        return "\n".join(lines)
