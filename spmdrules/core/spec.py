"""TensorSpec (what a rule receives) and SpmdInfo (what it returns)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import InvalidDistAttrError

# Immutable value types set their slots once; bound here to keep construction cheap.
_set = object.__setattr__


class TensorSpec:
    """A tensor's global shape and its DistAttr. Immutable, hashable, compares by value.

    >>> from spmdrules import ProcessMesh
    >>> mesh = ProcessMesh([0, 1, 2, 3])
    >>> TensorSpec([64, 36], DistAttr(mesh, [0, -1]))
    TensorSpec(shape=[64, 36], [0,-1])
    """

    __slots__ = ("_hash", "attr", "shape")

    shape: tuple[int, ...]
    attr: DistAttr
    _hash: int

    def __init__(self, shape: Sequence[int], attr: DistAttr) -> None:
        if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | tuple):
            try:
                shape = tuple(shape)
            except TypeError:
                raise InvalidDistAttrError(
                    f"TensorSpec: shape must be a list of ints, got {shape!r}"
                ) from None
        dims: list[int] = []
        for i, s in enumerate(shape):
            if isinstance(s, bool):
                raise InvalidDistAttrError(f"TensorSpec: shape dim {i} is {s!r}, not an int")
            try:
                si = int(s)
            except (TypeError, ValueError):
                raise InvalidDistAttrError(
                    f"TensorSpec: shape dim {i} is {s!r}, not an int"
                ) from None
            if si != s or si < 0:
                raise InvalidDistAttrError(
                    f"TensorSpec: shape dim {i} is {s!r}; sizes must be integers >= 0"
                )
            dims.append(si)
        if not isinstance(attr, DistAttr):
            raise InvalidDistAttrError(f"TensorSpec: attr must be a DistAttr, got {attr!r}")
        if attr.ndim != len(dims):
            raise InvalidDistAttrError(
                f"TensorSpec: shape {dims} has {len(dims)} dims but the mapping "
                f"{attr.mapping_str()} has {attr.ndim}; give one mapping entry per tensor dim"
            )
        self._init(tuple(dims), attr)

    def _init(self, shape: tuple[int, ...], attr: DistAttr) -> None:
        _set(self, "shape", shape)
        _set(self, "attr", attr)
        _set(self, "_hash", hash((shape, attr)))

    @classmethod
    def _make(cls, shape: tuple[int, ...], attr: DistAttr) -> TensorSpec:
        self = object.__new__(cls)
        self._init(shape, attr)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TensorSpec is immutable")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def mesh(self) -> Any:
        return self.attr.mesh

    @property
    def dims_mapping(self) -> tuple[int, ...]:
        return self.attr.dims_mapping

    @property
    def multi_dims_mapping(self) -> tuple[tuple[int, ...], ...]:
        return self.attr.multi_dims_mapping

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, TensorSpec):
            return NotImplemented
        return self._hash == other._hash and self.shape == other.shape and self.attr == other.attr

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (TensorSpec, (list(self.shape), self.attr))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={list(self.shape)}, {self.attr.mapping_str()})"


AttrSlot = DistAttr | None | tuple[DistAttr | None, ...]


class SpmdInfo:
    """A rule's answer: one entry per tensor argument (``inputs``) and per output (``outputs``).

    A variadic argument or output is a tuple of DistAttr; an absent optional tensor is ``None``.
    Unpacks like Paddle's pair: ``inputs, outputs = info``.
    """

    __slots__ = ("inputs", "outputs")

    inputs: tuple[AttrSlot, ...]
    outputs: tuple[AttrSlot, ...]

    def __init__(self, inputs: Sequence[AttrSlot], outputs: Sequence[AttrSlot]) -> None:
        _set(self, "inputs", tuple(inputs))
        _set(self, "outputs", tuple(outputs))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SpmdInfo is immutable")

    def __iter__(self) -> Iterator[tuple[AttrSlot, ...]]:
        yield self.inputs
        yield self.outputs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpmdInfo):
            return NotImplemented
        return self.inputs == other.inputs and self.outputs == other.outputs

    def __hash__(self) -> int:
        return hash((self.inputs, self.outputs))

    def __repr__(self) -> str:
        def fmt(a: AttrSlot) -> str:
            if a is None:
                return "None"
            if isinstance(a, tuple):
                return "[" + ", ".join(fmt(x) for x in a) + "]"
            return a.mapping_str()

        ins = ", ".join(fmt(a) for a in self.inputs)
        outs = ", ".join(fmt(a) for a in self.outputs)
        return f"SpmdInfo(inputs=[{ins}], outputs=[{outs}])"


_T = TypeVar("_T")


def flat_slots(slots: Iterable[Any], kind: type[_T]) -> list[_T]:
    """The values of argument slots, in order. A slot holds one ``kind`` value, a list (or
    tuple) of them for a list argument, whose absent entries are None, or None for an absent
    optional argument; the Nones are skipped."""
    out: list[_T] = []
    for s in slots:
        if isinstance(s, kind):
            out.append(s)
        elif s is not None:
            out.extend(x for x in s if x is not None)
    return out
