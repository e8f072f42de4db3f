"""Rule attributes: their types, and the check of a value against its declared type.

A rule declares each attribute with a Paddle C++ name, a type and a default (``A(...)``); a call's
value is checked once and normalised to the type: a "float" is a Python float, a "number" an int
or a float kept as given (an integer constant stays exact), an "ints" a tuple of ints.
"""

from __future__ import annotations

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
    t = p.type
    if t == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, int) and v in (0, 1):
            return bool(v)
    elif t == "int":
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if _is_np_int(v):
            return int(v)
    elif t == "float":
        if isinstance(v, float | int) and not isinstance(v, bool):
            return float(v)
    elif t == "number":
        n = as_number(v)
        if n is not None:
            return n
    elif t == "str":
        if isinstance(v, str):
            return v
    elif t == "ints":
        if isinstance(v, int) and not isinstance(v, bool):
            return (v,)
        if isinstance(v, list | tuple) and all(
            (isinstance(e, int) and not isinstance(e, bool)) or _is_np_int(e) for e in v
        ):
            return tuple(int(e) for e in v)
    elif t == "floats":
        if isinstance(v, list | tuple) and all(
            isinstance(e, float | int) and not isinstance(e, bool) for e in v
        ):
            return tuple(float(e) for e in v)
    elif t == "dtype":
        return str(v)
    raise RuleArgumentError(f"{op}: attribute {p.name!r} must be {TYPE_WORDS[t]}, got {v!r}")


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


def _is_np_int(v: Any) -> bool:
    import numpy as np

    return isinstance(v, np.integer)


__all__ = ["TYPE_WORDS", "A", "AttrParam", "AttrType", "as_number", "check_attr"]
