"""Rule attributes: their types, and the check of a value against its declared type.

A rule declares each attribute with a Paddle C++ name, a type and a default (``A(...)``); a call's
value is checked once and normalised to the type: a "float" is a Python float, a "number" an int
or a float kept as given (an integer constant stays exact), an "ints" a tuple of ints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from spmdrules.core.errors import RuleArgumentError

AttrType = Literal["bool", "int", "float", "number", "str", "ints", "floats", "dtype"]


@dataclass(frozen=True, slots=True)
class AttrParam:
    """A non-tensor attribute with its Paddle C++ name, type and default."""

    name: str
    type: AttrType
    default: Any


def A(name: str, type_: AttrType, default: Any) -> AttrParam:
    return AttrParam(name, type_, default)


def check_attr(op: str, p: AttrParam, v: Any) -> Any:
    """``v`` as the attribute ``p`` of ``op`` takes it, or a RuleArgumentError."""
    ok = coerce_attr(p, v)
    if ok is INVALID:
        raise RuleArgumentError(f"{op}: attribute {p.name!r} must be {TYPE_WORDS[p.type]}, "
                                f"got {v!r}")
    return ok


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


#: what :func:`coerce_attr` returns for a value its type does not take
INVALID: Final = _Invalid()


def coerce_attr(p: AttrParam, v: Any) -> Any:
    """``v`` normalised to the type of attribute ``p``, or :data:`INVALID`.

    The one coercion behind both the registry's check (a RuleArgumentError) and the graph's
    (an OpAttributeError naming the node), so the two accept the same values: numpy scalars and
    arrays as their Python counterparts, a bool never as a number."""
    return _COERCE[p.type](v)


def _bool(v: Any) -> Any:
    import numpy as np

    if isinstance(v, bool | np.bool_) or (_is_int(v) and v in (0, 1)):
        return bool(v)
    return INVALID


def _int(v: Any) -> Any:
    return int(v) if _is_int(v) else INVALID


def _float(v: Any) -> Any:
    return float(v) if _is_real(v) else INVALID


def _number(v: Any) -> Any:
    n = as_number(v)
    return INVALID if n is None else n


def _str(v: Any) -> Any:
    return v if isinstance(v, str) else INVALID


def _ints(v: Any) -> Any:
    if _is_int(v):
        return (int(v),)
    if _is_sequence(v) and all(_is_int(e) for e in v):
        return tuple(int(e) for e in v)
    return INVALID


def _floats(v: Any) -> Any:
    if _is_sequence(v) and all(_is_real(e) for e in v):
        return tuple(float(e) for e in v)
    return INVALID


def _dtype(v: Any) -> Any:
    import numpy as np

    if isinstance(v, str):
        return v
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return str(np.dtype(v))
    return INVALID


def _is_int(v: Any) -> bool:
    import numpy as np

    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    import numpy as np

    return isinstance(v, float | int | np.floating | np.integer) and not isinstance(v, bool)


def _is_sequence(v: Any) -> bool:
    import numpy as np

    return isinstance(v, Sequence | np.ndarray) and not isinstance(v, str | bytes)


_COERCE: Final[dict[str, Callable[[Any], Any]]] = {
    "bool": _bool, "int": _int, "float": _float, "number": _number, "str": _str, "ints": _ints,
    "floats": _floats, "dtype": _dtype,
}


def as_number(v: Any) -> int | float | None:
    """``v`` as a "number" attribute, None if it is none (a bool is not a number). An int stays
    an int, so a constant of an integer dtype is exact (a float64 holds 53 bits of an int64);
    an int beyond int64, which no integer dtype holds, is a float."""
    import numpy as np

    if isinstance(v, bool | np.bool_):
        return None
    if isinstance(v, int | np.integer):
        i = int(v)
        return i if -(2**63) <= i < 2**63 else float(i)
    if isinstance(v, float | np.floating):
        return float(v)
    return None


TYPE_WORDS: Final = {
    "bool": "a bool",
    "int": "an int",
    "float": "a float",
    "number": "an int or a float",
    "str": "a str",
    "ints": "a list of ints",
    "floats": "a list of floats",
    "dtype": "a dtype name",
}


__all__ = [
    "INVALID", "TYPE_WORDS", "A", "AttrParam", "AttrType", "as_number", "check_attr", "coerce_attr",
]
