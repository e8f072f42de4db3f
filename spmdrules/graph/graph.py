"""The Graph IR: ops and tensors in a networkx DiGraph, validated as it is built.

Design. The DiGraph is bipartite: every op and every tensor is a node, with an edge tensor -> op
for each operand and op -> tensor for each result. Tensors are nodes (not edge labels) because a
tensor has one producer but many consumers, graph inputs and parameters have no producer at all,
and the completion pass keeps one attribute per tensor, not per use. The node keys are the
slotted ``Op`` and ``Tensor`` objects themselves (hashed by identity, empty attribute dicts), so
networkx algorithms hand back the objects with no lookups, and per-node data stays in ``__slots__``:
a 21k-op model costs a few tens of MB. Attributes set for every tensor at once (``set_attrs``,
which completion uses, and ``reset_attrs``) stay in one list on the graph until a single tensor's
attribute is set or the graph changes: writing into each scattered Tensor object costs a cache
miss per tensor on large models. ``Tensor.attr`` reads either the same way.

Order. ``Op.operands`` and ``Op.results`` keep the rule's argument order (networkx edges have
none). ``Graph.topological_order()`` is networkx's lexicographical topological sort keyed by
natural name order, so it depends on the names only, never on insertion order; it is cached,
and each op's position is stored in ``Op.order``. ``Tensor.producer`` is a slot; consumers are the
node's successors in the DiGraph, sorted by ``Op.order``.

The graph also keeps its annotated tensors (``Tensor.annotation`` registers them) and a count of
declared tensors no op produces yet, so neither completion nor ``validate`` visits every tensor.

Validation. ``add_op`` checks the op type, arity, attributes and shapes (through
``spmdrules.graph.shapes``) before it touches the graph, so a failed call leaves the graph unchanged.
Cycles can only arise when an op adopts a declared tensor that is already consumed; they are found
by networkx on ``validate()``, which also runs when a ``with Graph():`` block ends.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import networkx as nx

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import did_you_mean
from spmdrules.core.spec import SpmdInfo, TensorSpec, flat_slots
from spmdrules.engine.registry import Rule
from spmdrules.graph import shapes
from spmdrules.graph.errors import (
    ArityError,
    DuplicateNameError,
    GraphContextError,
    GraphCycleError,
    InvalidNameError,
    ProducerError,
    ShapeError,
    UnknownNodeError,
    UnknownTensorError,
)
from spmdrules.graph.opschema import OpSchema, op_schema
from spmdrules.graph.shapes import Arg, OutMeta, TensorMeta

if TYPE_CHECKING:
    from spmdrules.graph.annotate import Annotation

Role = Literal["input", "param", "value"]
_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/:\[\]]*$")
_DIGITS: Final = re.compile(r"(\d+)")

_CURRENT: contextvars.ContextVar[tuple[Graph, ...]] = contextvars.ContextVar(
    "spmdrules_graph_stack", default=()
)


def _natural_key(name: str) -> tuple[str | int, ...]:
    """'layer10' after 'layer9': strings at even positions, ints at odd ones, so keys compare."""
    parts = _DIGITS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


class Tensor:
    """A tensor of a graph, and the handle ops are called on.

    ``attr`` is the tensor's current DistAttr (None until annotated or completed); ``annotation``
    is the user's ``shard(...)`` annotation, which completion never overwrites.
    """

    __slots__ = (
        "_annotation", "_attr", "_dtype", "_shape", "graph", "index", "name", "order", "producer",
        "role",
    )

    name: str
    _shape: tuple[int, ...]
    _dtype: str
    role: Role
    graph: Graph
    producer: Op | None
    index: int
    order: int
    _attr: DistAttr | None
    _annotation: Annotation | None

    def __init__(
        self, graph: Graph, name: str, shape: tuple[int, ...], dtype: str, role: Role
    ) -> None:
        self.graph = graph
        self.name = name
        self._shape = shape
        self._dtype = dtype
        self.role = role
        self.producer = None
        self.index = -1  # position among the producer's flat results
        self.order = -1  # position in Graph.tensors, set with the topological order
        self._attr = None
        self._annotation = None

    @property
    def attr(self) -> DistAttr | None:
        attrs = self.graph._attrs
        return self._attr if attrs is None else attrs[self.order]

    @attr.setter
    def attr(self, attr: DistAttr | None) -> None:
        g = self.graph
        if g._attrs is not None:
            g._store_attrs()
        self._attr = attr

    @property
    def annotation(self) -> Annotation | None:
        return self._annotation

    @annotation.setter
    def annotation(self, ann: Annotation | None) -> None:
        # the graph keeps its annotated tensors, so completion need not visit every tensor
        self._annotation = ann
        if ann is None:
            self.graph._annotated.pop(self, None)
        else:
            self.graph._annotated[self] = ann

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @shape.setter
    def shape(self, shape: tuple[int, ...]) -> None:
        # Derived per-topology data (completion's index) holds shapes: a new shape is a new
        # topology, so those caches rebuild.
        self.graph._changed()
        self._shape = shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @dtype.setter
    def dtype(self, dtype: str) -> None:
        self.graph._changed()  # as for a shape: completion's index holds the dtypes
        self._dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """The global size in bytes (all shards together)."""
        return self.numel * shapes.DTYPE_BYTES[self.dtype]

    @property
    def meta(self) -> TensorMeta:
        return TensorMeta(self.shape, self.dtype)

    @property
    def consumers(self) -> tuple[Op, ...]:
        return self.graph.consumers(self)

    @property
    def is_source(self) -> bool:
        """A graph input or parameter: no op produces it."""
        return self.role != "value"

    def __repr__(self) -> str:
        a = f", attr={self.attr.mapping_str()}" if self.attr is not None else ""
        return f"Tensor({self.name!r}, shape={list(self.shape)}, dtype={self.dtype}{a})"

    # numpy-style operators build ops in the tensor's graph
    def __add__(self, other: Tensor) -> Tensor:
        return _binary("add", self, other)

    def __sub__(self, other: Tensor) -> Tensor:
        return _binary("subtract", self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        return _binary("multiply", self, other)

    def __truediv__(self, other: Tensor) -> Tensor:
        return _binary("divide", self, other)

    def __matmul__(self, other: Tensor) -> Tensor:
        return _binary("matmul", self, other)

    @property
    def T(self) -> Tensor:
        """The tensor with its dims reversed (numpy's ``.T``)."""
        out = self.graph.add_op("transpose", [self], {"perm": list(range(self.ndim))[::-1]})
        assert isinstance(out.results[0], Tensor)
        return out.results[0]


def _binary(op_type: str, x: Tensor, y: Any) -> Tensor:
    if not isinstance(y, Tensor):
        raise ArityError(
            f"{op_type}({x.name!r}, {y!r}): both operands must be tensors of the graph; "
            "create constants with g.input(...) or g.param(...)"
        )
    op = x.graph.add_op(op_type, [x, y])
    out = op.results[0]
    assert isinstance(out, Tensor)
    return out


class Op:
    """An op node: a registered rule name, its attributes and its ordered operands and results.

    ``operands`` and ``results`` have one entry per tensor parameter of the rule (``schema``):
    a Tensor, None for an absent optional, a tuple for a list parameter. ``attrs`` holds the
    attribute values in the rule's order, defaults filled, ready to pass positionally.
    """

    __slots__ = ("attrs", "name", "operands", "order", "results", "schema", "type")

    name: str
    type: str
    schema: OpSchema
    attrs: tuple[Any, ...]
    operands: tuple[Tensor | tuple[Tensor, ...] | None, ...]
    results: tuple[Tensor | tuple[Tensor, ...], ...]
    order: int

    def __init__(
        self,
        name: str,
        schema: OpSchema,
        attrs: tuple[Any, ...],
        operands: tuple[Tensor | tuple[Tensor, ...] | None, ...],
    ) -> None:
        self.name = name
        self.type = schema.name
        self.schema = schema
        self.attrs = attrs
        self.operands = operands
        self.results = ()
        self.order = -1

    @property
    def rule(self) -> Rule:
        return self.schema.rule

    @property
    def reverse_attrs(self) -> tuple[Any, ...]:
        """The attributes the reverse rule takes positionally (may be fewer than ``attrs``)."""
        return self.schema.reverse_attr_values(self.attrs)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The operand tensors, flattened in order (absent optionals skipped)."""
        return tuple(flat_slots(self.operands, Tensor))

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The result tensors, flattened in order."""
        return tuple(flat_slots(self.results, Tensor))

    # ---- calling the op's rule ------------------------------------------------------------------
    def forward_args(self, spec: Callable[[Tensor], TensorSpec]) -> tuple[Any, ...]:
        """Positional arguments of ``rule.infer_forward`` for this op: ``spec(t)`` per operand
        (a list for a list parameter, None for an absent optional), then the attributes. A
        generic rule also gets the results, as its second list."""
        args: list[Any] = [_specs(v, spec) for v in self.operands]
        if self.schema.generic:
            args.extend(_specs(r, spec) for r in self.results)
        args.extend(self.attrs)
        return tuple(args)

    def reverse_args(self, spec: Callable[[Tensor], TensorSpec]) -> tuple[Any, ...]:
        """Positional arguments of ``rule.infer_reverse``: operands, results, reverse attributes."""
        args: list[Any] = [_specs(v, spec) for v in self.operands]
        args.extend(_specs(r, spec) for r in self.results)
        args.extend(self.schema.reverse_attr_values(self.attrs))
        return tuple(args)

    def flat_info(self, info: SpmdInfo) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]]:
        """A rule's answer as one DistAttr per tensor of ``inputs`` and of ``outputs``.

        Rules group list tensors differently (concat answers a tuple for its list operand, split
        one entry per piece, the generic rules one entry per tensor); flattening both sides and
        dropping absent optionals lines every convention up with ``inputs`` / ``outputs``.
        """
        ins = tuple(flat_slots(info.inputs, DistAttr))
        outs = tuple(flat_slots(info.outputs, DistAttr))
        n_in, n_out = len(self.inputs), len(self.outputs)
        if self.schema.generic and len(ins) == n_in + n_out and not outs:
            ins, outs = ins[:n_in], ins[n_in:]
        if len(ins) != n_in or len(outs) != n_out:
            raise ArityError(
                f"op {self.name!r} ({self.type}): its rule answered {len(ins)} input and "
                f"{len(outs)} output attributes for {n_in} operand and {n_out} result tensors"
            )
        return ins, outs

    def attr(self, name: str) -> Any:
        i = self.schema.attr_index.get(name)
        if i is None:
            raise KeyError(f"op {self.name!r} ({self.type}) has no attribute {name!r}")
        return self.attrs[i]

    @property
    def attr_dict(self) -> dict[str, Any]:
        return {a.name: v for a, v in zip(self.schema.attrs, self.attrs, strict=True)}

    def __repr__(self) -> str:
        ins = ", ".join(_fmt(o) for o in self.operands)
        outs = ", ".join(_fmt(r) for r in self.results)
        at = "".join(f", {k}={v!r}" for k, v in self.attr_dict.items())
        return f"Op({self.name!r}: {outs} = {self.type}({ins}{at}))"


def _specs(
    v: Tensor | tuple[Tensor, ...] | None, spec: Callable[[Tensor], TensorSpec]
) -> TensorSpec | list[TensorSpec] | None:
    if v is None:
        return None
    if isinstance(v, Tensor):
        return spec(v)
    return [spec(t) for t in v]


def _fmt(item: Tensor | tuple[Tensor, ...] | None) -> str:
    if item is None:
        return "None"
    if isinstance(item, Tensor):
        return item.name
    return "[" + ", ".join(t.name for t in item) + "]"


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
        "_annotated", "_attrs", "_auto", "_nx", "_ops", "_tensor_order", "_tensors", "_topo",
        "_unproduced", "name",
    )
    __hash__ = None  # type: ignore[assignment]  # compares by content, so not hashable

    name: str
    _nx: nx.DiGraph
    _tensors: dict[str, Tensor]
    _ops: dict[str, Op]
    _topo: tuple[Op, ...] | None
    _tensor_order: tuple[Tensor, ...] | None
    _auto: int
    _annotated: dict[Tensor, Annotation]
    _unproduced: int
    _attrs: list[DistAttr | None] | None

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nx = nx.DiGraph()
        self._tensors = {}
        self._ops = {}
        self._topo = None
        self._tensor_order = None
        self._auto = 0
        self._annotated = {}  # the tensors with an annotation (kept by Tensor.annotation)
        self._unproduced = 0  # declared tensors no op produces yet (what validate() reports)
        # Every tensor's attribute in ``tensors`` order, when set all at once (completion, reset):
        # one list instead of a write into each Tensor, which on large models costs a cache miss
        # per tensor. Tensor.attr reads it; the first single write, or a change of the graph,
        # stores it into the tensors and drops it.
        self._attrs = None

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
        """A tensor that an op added later will produce (``add_op(..., results=[name])``).

        Loaders and out-of-order builders declare every tensor first, then add ops in any order.
        """
        return self._new_tensor(name, shape, dtype, "value")

    def _new_tensor(self, name: str, shape: Sequence[int], dtype: str, role: Role) -> Tensor:
        self._check_name(name, "tensor")
        if name in self._tensors:
            raise DuplicateNameError(
                f"tensor {name!r} already exists in graph {self.name!r}; give the new tensor "
                "another name"
            )
        t = Tensor(self, name, _check_shape(name, shape), _check_dtype(name, dtype), role)
        self._changed()
        self._tensors[name] = t
        if role == "value":
            self._unproduced += 1
        self._nx.add_node(t)
        return t

    @staticmethod
    def _check_name(name: Any, what: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidNameError(
                f"{what} name {name!r} is not a valid name; use letters, digits and _ . - / : [ ] "
                "starting with a letter or _"
            )

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

    def _resolve(self, node: str, param: str, v: Any) -> Tensor:
        if isinstance(v, Tensor):
            if v.graph is not self:
                raise GraphContextError(
                    f"op {node!r}: operand {param!r} is tensor {v.name!r} of graph "
                    f"{v.graph.name!r}, not of graph {self.name!r}; build each op in the graph "
                    "of its operands"
                )
            return v
        if isinstance(v, str):
            return self.tensor(v)
        raise ArityError(
            f"op {node!r}: operand {param!r} must be a tensor of the graph (or its name), got "
            f"{type(v).__name__} {v!r}"
        )

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
            self._check_name(name, "op")
            if name in self._ops:
                raise DuplicateNameError(
                    f"op {name!r} already exists in graph {self.name!r}; give the new op another name"
                )
        ops_in = self._bind_operands(name, schema, operands)
        attr_values = schema.bind_attrs(name, attrs)
        metas = self._infer(name, schema, ops_in, attr_values, result_metas)
        flat_metas = [m for ms in metas for m in (ms if isinstance(ms, tuple) and not
                                                  isinstance(ms, TensorMeta) else (ms,))]
        names = self._result_names(name, schema, metas, results)
        adopt = self._check_results(name, names, flat_metas)

        self._changed()
        op = Op(name, schema, attr_values, ops_in)
        g = self._nx
        g.add_node(op)
        for t in flat_slots(ops_in, Tensor):
            g.add_edge(t, op)
        flat: list[Tensor] = []
        for i, (rname, meta) in enumerate(zip(names, flat_metas, strict=True)):
            # an adopted tensor that already has consumers may close a cycle: validate() finds it
            t = adopt.get(rname) or Tensor(self, rname, meta.shape, meta.dtype, "value")
            if rname in adopt:
                self._unproduced -= 1
            self._tensors[rname] = t
            t.producer = op
            t.index = i
            g.add_edge(op, t)
            flat.append(t)
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

    def _auto_name(self, op_type: str) -> str:
        while True:
            name = f"{op_type}_{self._auto}"
            self._auto += 1
            if name not in self._ops and name not in self._tensors:
                return name

    def _bind_operands(
        self, name: str, schema: OpSchema, operands: Sequence[Any]
    ) -> tuple[Tensor | tuple[Tensor, ...] | None, ...]:
        if isinstance(operands, str | Tensor) or not isinstance(operands, Sequence):
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
                if isinstance(v, Tensor | str) or not isinstance(v, Sequence):
                    raise ArityError(
                        f"op {name!r} ({schema.name}): operand {p.name!r} is a list of tensors; "
                        f"pass a list, got {v!r}"
                    )
                out.append(tuple(self._resolve(name, f"{p.name}[{j}]", e) for j, e in enumerate(v)))
            elif v is None:
                if p.kind != "optional":
                    raise ArityError(
                        f"op {name!r} ({schema.name}): missing tensor operand {p.name!r}; the "
                        f"signature is {schema.signature()}"
                    )
                out.append(None)
            else:
                out.append(self._resolve(name, p.name, v))
        return tuple(out)

    def _infer(
        self,
        name: str,
        schema: OpSchema,
        ops_in: tuple[Tensor | tuple[Tensor, ...] | None, ...],
        attr_values: tuple[Any, ...],
        result_metas: Sequence[tuple[Sequence[int], str]] | None,
    ) -> tuple[OutMeta, ...]:
        if schema.generic:
            if result_metas is None:
                raise ArityError(
                    f"op {name!r} ({schema.name}): a generic rule cannot infer result shapes; "
                    "pass result_metas=[(shape, dtype), ...] (ops.<name>(..., outs=[...]))"
                )
            declared = tuple(
                TensorMeta(_check_shape(f"{name} result {i}", s), _check_dtype(f"{name} result {i}", d))
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
        attr_map = {a.name: val for a, val in zip(schema.attrs, attr_values, strict=True)}
        metas = shapes.infer_meta(schema.name, args, attr_map, node=name)
        if len(metas) != len(schema.outputs):
            raise AssertionError(f"{schema.name}: shape rule and registered outputs disagree")
        return metas

    def _result_names(
        self, name: str, schema: OpSchema, metas: tuple[OutMeta, ...], results: Sequence[str] | None
    ) -> list[str]:
        n_flat = sum(1 if isinstance(m, TensorMeta) else len(m) for m in metas)
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
            self._check_name(r, "tensor")
            if r in seen:
                raise DuplicateNameError(f"op {name!r}: result name {r!r} is given twice")
            seen.add(r)
        return names

    def _check_results(
        self, name: str, names: list[str], metas: list[TensorMeta]
    ) -> dict[str, Tensor]:
        adopt: dict[str, Tensor] = {}
        for r, m in zip(names, metas, strict=True):
            t = self._tensors.get(r)
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
            if t.shape != m.shape or t.dtype != m.dtype:
                raise ShapeError(
                    f"op {name!r}: result {r!r} was declared {list(t.shape)} {t.dtype} but the op "
                    f"produces {list(m.shape)} {m.dtype}; fix the declaration or the op's inputs"
                )
            adopt[r] = t
        return adopt

    # ---- queries ------------------------------------------------------------------------------
    @property
    def nx(self) -> nx.DiGraph:
        """The networkx DiGraph (nodes: Op and Tensor objects). Read it; change the graph through
        ``add_op`` so the caches stay right."""
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
                t._attr = None if t._annotation is None else t._annotation.attr
            return self
        attrs: list[DistAttr | None] = [None] * len(self.tensors)
        for t, ann in self._annotated.items():
            attrs[t.order] = ann.attr
        self._attrs = attrs
        return self

    def set_attrs(self, attrs: Sequence[DistAttr | None]) -> Graph:
        """Set every tensor's attribute at once, one per tensor in ``tensors`` order."""
        if len(attrs) != len(self.tensors):
            raise ArityError(
                f"graph {self.name!r}: set_attrs got {len(attrs)} attributes for "
                f"{len(self.tensors)} tensors; give one per tensor, in Graph.tensors order"
            )
        self._attrs = list(attrs)
        return self

    def _store_attrs(self) -> None:
        """Write the all-at-once attributes into the tensors (before one changes or the tensor
        order does)."""
        attrs, self._attrs = self._attrs, None
        if attrs is not None:
            assert self._tensor_order is not None
            for t, a in zip(self._tensor_order, attrs, strict=True):
                t._attr = a

    def _changed(self) -> None:
        """The graph's content changes: per-topology caches and the tensor order are stale."""
        self._store_attrs()
        self._topo = None

    def producer(self, t: Tensor | str) -> Op | None:
        return (self.tensor(t) if isinstance(t, str) else t).producer

    def consumers(self, t: Tensor | str) -> tuple[Op, ...]:
        """The ops that read ``t``, each once, in topological order."""
        tt = self.tensor(t) if isinstance(t, str) else t
        succ = self._nx._succ[tt]
        if len(succ) <= 1:
            return tuple(succ)
        self.topological_order()
        return tuple(sorted(succ, key=_op_order))

    def topological_order(self) -> tuple[Op, ...]:
        """Ops in an order where every op comes after the producers of its operands.

        Ties are broken by natural name order, so the order is a function of the graph's content
        alone. Cached until the graph changes; each op's position is in ``Op.order``.
        """
        if self._topo is not None:
            return self._topo
        try:
            nodes = nx.lexicographical_topological_sort(self._nx, key=_node_key)
            order = tuple(n for n in nodes if isinstance(n, Op))
        except nx.NetworkXUnfeasible:
            raise self._cycle_error() from None
        for i, op in enumerate(order):
            op.order = i
        src = sorted((t for t in self._tensors.values() if t.producer is None),
                     key=lambda t: _natural_key(t.name))
        tensors = (*src, *(t for op in order for t in flat_slots(op.results, Tensor)))
        for i, t in enumerate(tensors):
            t.order = i
        self._topo = order
        self._tensor_order = tensors
        return order

    def _cycle_error(self) -> GraphCycleError:
        edges = nx.find_cycle(self._nx)
        ops = [u.name for u, _ in edges if isinstance(u, Op)]
        via = [u.name for u, _ in edges if isinstance(u, Tensor)]
        return GraphCycleError(
            f"graph {self.name!r} has a cycle: op {' -> '.join(ops + ops[:1])} (through tensors "
            f"{', '.join(via)}); an op may not consume, directly or through other ops, a tensor it "
            f"produces. Give the fed-back value of op {ops[0]!r} a new tensor instead"
        )

    def validate(self, *, full: bool = False) -> Graph:
        """Check the whole graph: every non-source tensor has a producer, and there is no cycle.

        With ``full`` it also re-runs shape inference on every op and compares it with the
        tensors' shapes (for graphs whose tensors were changed after the ops were added).
        """
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
                metas = self._infer(op.name, op.schema, op.operands, op.attrs, None)
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
            (t.name, t.shape, t.dtype, t.role, t.attr, ann(t)) for t in self._tensors.values()
        ))

        def names(v: Tensor | tuple[Tensor, ...] | None) -> Any:
            if v is None or isinstance(v, Tensor):
                return None if v is None else v.name
            return tuple(t.name for t in v)

        ops = tuple(sorted(
            (o.name, o.type, o.attrs, tuple(names(v) for v in o.operands),
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
        return item in self._nx._node

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


def _node_key(n: Op | Tensor) -> tuple[str | int, ...]:
    return _natural_key(n.name)


def _op_order(op: Op) -> int:
    return op.order


def _tensor_order(t: Tensor) -> int:
    return t.order


def _check_shape(name: str, shape: Any) -> tuple[int, ...]:
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


def _check_dtype(name: str, dtype: Any) -> str:
    d = str(dtype)
    if d not in shapes.DTYPES:
        hint = did_you_mean(d, sorted(shapes.DTYPES))
        raise ShapeError(
            f"tensor {name!r}: dtype {dtype!r} is not one of {sorted(shapes.DTYPES)}{hint}"
        )
    return d


def current_graph(node: str) -> Graph:
    """The graph of an enclosing ``with Graph():`` block; an error naming ``node`` otherwise."""
    g = Graph.current()
    if g is None:
        raise GraphContextError(
            f"{node}: no graph is active; build ops inside `with spmdrules.graph.graph.Graph() as g:` "
            "or on tensors of a graph"
        )
    return g
