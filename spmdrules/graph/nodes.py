"""The nodes of the Graph IR: ``Tensor`` (also the handle ops are called on) and ``Op``.

A node holds a reference to its graph, typed by what it needs of it (``OwnerGraph``), so this
module does not import ``spmdrules.graph.graph``, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Final, Literal, Protocol

from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo, TensorSpec, flat_slots
from spmdrules.engine.registry import Rule
from spmdrules.graph.annotation import Annotation
from spmdrules.graph.errors import ArityError
from spmdrules.graph.opschema import OpSchema
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES, TensorMeta
from spmdrules.graph.storage import Interleaved

Role = Literal["input", "param", "value"]


class OwnerGraph(Protocol):
    """What a node needs of its graph; ``spmdrules.graph.graph.Graph`` is the one implementation."""

    name: str

    attrs_in_order: list[DistAttr | None] | None

    def store_attrs(self) -> None: ...

    def invalidate(self) -> None: ...

    def note_annotation(self, t: Tensor, ann: Annotation | None) -> None: ...

    def tensor(self, name: str) -> Tensor: ...

    def consumers(self, t: Tensor | str) -> tuple[Op, ...]: ...

    def add_op(
        self, op_type: str, operands: Sequence[Any], attrs: Mapping[str, Any] | None = None, *,
        name: str | None = None, results: Sequence[str] | None = None,
        result_metas: Sequence[tuple[Sequence[int], str]] | None = None,
    ) -> Op: ...


class Tensor:
    """A tensor of a graph, and the handle ops are called on.

    ``attr`` is the tensor's current DistAttr (None until annotated or completed); ``annotation``
    is the user's ``shard(...)`` annotation, which completion never overwrites.
    """

    __slots__ = (
        "_annotation", "_attr", "_dtype", "_shape", "graph", "index", "name", "order", "producer",
        "readers", "role", "storage",
    )

    name: str
    _shape: tuple[int, ...]
    _dtype: str
    role: Role
    graph: OwnerGraph
    producer: Op | None
    index: int
    order: int
    _attr: DistAttr | None
    _annotation: Annotation | None
    #: the order the graph holds this tensor's values in when it is not the user's (a
    #: chunk-aware plan interleaves a fused weight, its bias and what is computed from them
    #: before the cuts): ``spmdrules.graph.storage``. Internal, like a split: the executors
    #: take and give values in the user's order
    storage: Interleaved | None
    #: the ops that read this tensor, each once, in the order they were added (kept by the
    #: graph's ``add_op`` and ``remove_op``; ``consumers`` gives them in topological order)
    readers: list[Op]

    def __init__(
        self, graph: OwnerGraph, name: str, shape: tuple[int, ...], dtype: str, role: Role
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
        self.storage = None
        self.readers = []

    @property
    def attr(self) -> DistAttr | None:
        attrs = self.graph.attrs_in_order
        return self._attr if attrs is None else attrs[self.order]

    @attr.setter
    def attr(self, attr: DistAttr | None) -> None:
        g = self.graph
        if g.attrs_in_order is not None:
            g.store_attrs()
        self._attr = attr

    def hold_attr(self, attr: DistAttr | None) -> None:
        """Keep ``attr`` in the tensor itself: the graph writes its all-at-once attributes back
        through this (``attr``'s setter would first ask the graph to do just that)."""
        self._attr = attr

    @property
    def annotation(self) -> Annotation | None:
        return self._annotation

    @annotation.setter
    def annotation(self, ann: Annotation | None) -> None:
        # the graph keeps its annotated tensors, so completion need not visit every tensor
        self._annotation = ann
        self.graph.note_annotation(self, ann)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @shape.setter
    def shape(self, shape: tuple[int, ...]) -> None:
        # Derived per-topology data (completion's index) holds shapes: a new shape is a new
        # topology, so those caches rebuild.
        self.graph.invalidate()
        self._shape = shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @dtype.setter
    def dtype(self, dtype: str) -> None:
        self.graph.invalidate()  # as for a shape: completion's index holds the dtypes
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
        return self.numel * DTYPE_BYTES[self.dtype]

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


#: ``(tensor.shape, tensor.dtype)`` in one C call, for code that reads every tensor of a large
#: graph (completion's per-topology index): two property calls per tensor cost more there
tensor_meta: Final[Callable[[Tensor], tuple[tuple[int, ...], str]]] = attrgetter("_shape",
                                                                                 "_dtype")


class Op:
    """An op node: a registered rule name, its attributes and its ordered operands and results.

    ``operands`` and ``results`` have one entry per tensor parameter of the rule (``schema``):
    a Tensor, None for an absent optional, a tuple for a list parameter. ``attrs`` holds the
    attribute values in the rule's order, defaults filled, ready to pass positionally; ``extra``
    the op's attributes beyond its rule's (``schema.op_attrs``), which only shape inference and
    the kernel read. ``attr_dict`` has both, by name.
    """

    __slots__ = ("attrs", "extra", "name", "operands", "order", "results", "schema", "type")

    name: str
    type: str
    schema: OpSchema
    attrs: tuple[Any, ...]
    extra: tuple[Any, ...]
    operands: tuple[Tensor | tuple[Tensor, ...] | None, ...]
    results: tuple[Tensor | tuple[Tensor, ...], ...]
    order: int

    def __init__(
        self,
        name: str,
        schema: OpSchema,
        attrs: tuple[Any, ...],
        operands: tuple[Tensor | tuple[Tensor, ...] | None, ...],
        extra: tuple[Any, ...] = (),
    ) -> None:
        self.name = name
        self.type = schema.name
        self.schema = schema
        self.attrs = attrs
        self.extra = extra
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
        if i is not None:
            return self.attrs[i]
        j = self.schema.op_attr_index.get(name)
        if j is None:
            raise KeyError(f"op {self.name!r} ({self.type}) has no attribute {name!r}")
        return self.extra[j]

    @property
    def attr_dict(self) -> dict[str, Any]:
        """Every attribute of the op by name: the rule's, then the op's further ones."""
        d = {a.name: v for a, v in zip(self.schema.attrs, self.attrs, strict=True)}
        d.update(zip((a.name for a in self.schema.op_attrs), self.extra, strict=True))
        return d

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

