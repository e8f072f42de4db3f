"""Converters from user code: map a source model's op onto an existing rule family.

The importers look an op up in two tables: ``spmdrules.importers.aten.ATEN`` (torch; keyed
``name.overload`` for ATen ops, ``namespace.name.overload`` for the others, as
``mylib.rms_norm_rope.default``) and ``spmdrules.importers.onnx_ops.OPS`` (ONNX; keyed by op type
in the default domain, ``domain.OpType`` in any other). ``aten_converter`` and
``onnx_converter`` register into them from user code: a converter calls registered ops only
(``Ctx.call``), so what it maps onto is planned, completed, lowered and run as every other op of
that family. Registering an op that has a converter already is a ``ConverterError`` unless
``replace=True``.

The project's own converters live in modules named ``aten_<concept>.py`` and
``onnx_<concept>.py`` of this package, each registering with the ``aten`` / ``onnx_op``
decorator of its table; ``load()`` imports every such module (by name, in order) before an
import, so a new module registers by existing.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, TypeVar

from spmdrules.core.errors import DuplicateRegistrationError, SpmdError
from spmdrules.core.tables import caller

F = TypeVar("F", bound=Callable[..., Any])
_loaded: dict[str, bool] = {}


class ConverterError(SpmdError, ValueError):
    """A converter registration names no op, or an op that has a converter already."""


class DuplicateConverterError(DuplicateRegistrationError, ConverterError):
    """A converter for an op that has one already, without ``replace=True``."""


def load() -> None:
    """Import every converter module of the package (``aten_*``, ``onnx_*``), once."""
    if _loaded.get("done"):
        return
    import spmdrules.importers as pkg

    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if m.name.startswith(("aten_", "onnx_")):  # neither imports its framework
            importlib.import_module(f"{pkg.__name__}.{m.name}")
    _loaded["done"] = True


def key(target: Any) -> str:
    """The ATen table's key of a torch op (an ``OpOverload``): ``mm.default`` for ATen's,
    ``mylib.rms_norm_rope.default`` for another namespace's."""
    name = str(getattr(target, "__name__", target))
    ns = getattr(target, "namespace", "aten")
    return name if ns == "aten" else f"{ns}.{name}"


def _aten_keys(op: Any) -> list[str]:
    """``op`` as table keys: a torch ``OpOverload`` (one key), an ``OpOverloadPacket`` (every
    overload), or a string ``namespace::name`` (its ``default`` overload) or
    ``namespace::name.overload``."""
    if isinstance(op, str):
        if "::" not in op:
            raise ConverterError(f"aten_converter: {op!r} names no namespace; write it as torch "
                                 "does, 'aten::gather' or 'mylib::rms_norm_rope' (with "
                                 "'.overload' for another than default), or pass the op itself "
                                 "(torch.ops.mylib.rms_norm_rope.default)")
        ns, name = op.split("::", 1)
        if not ns or not name:
            raise ConverterError(f"aten_converter: {op!r} is not 'namespace::name[.overload]'")
        full = name if "." in name else f"{name}.default"
        return [full if ns == "aten" else f"{ns}.{full}"]
    if hasattr(op, "overloads") and hasattr(op, "_qualified_op_name"):
        return [key(getattr(op, o)) for o in op.overloads()]
    if hasattr(op, "namespace") and hasattr(op, "_schema"):
        return [key(op)]
    raise ConverterError(f"aten_converter: {op!r} is not a torch op; give torch.ops.<ns>.<name>"
                         "[.<overload>] or its 'namespace::name[.overload]'")


def aten_converter(*ops: Any, replace: bool = False) -> Callable[[F], F]:
    """Register the decorated ``converter(ctx, args)`` for torch ops (``_aten_keys``): ``ctx``
    is a ``spmdrules.importers.aten.Ctx``, ``args`` the node's arguments by the op schema's
    names; it returns the node's result (a graph tensor, or a tuple for several)."""
    from spmdrules.importers.aten import ATEN, aten

    load()
    keys = [k for op in ops for k in _aten_keys(op)]
    return _register(keys, ATEN, aten, replace, "aten_converter")


def onnx_converter(*op_types: str, domain: str = "", replace: bool = False) -> Callable[[F], F]:
    """Register the decorated ``converter(ctx)`` for ONNX op types of ``domain`` (the default
    ONNX domain when empty): ``ctx`` is a ``spmdrules.importers.onnx_ops.Ctx``; it returns the
    node's outputs in order."""
    from spmdrules.importers.onnx_ops import OPS, onnx_op
    from spmdrules.importers.onnx_read import DEFAULT_DOMAINS

    load()
    if not op_types or not all(isinstance(t, str) and t for t in op_types):
        raise ConverterError(f"onnx_converter: give op types as strings, got {op_types!r}")
    keys = [t if domain in DEFAULT_DOMAINS else f"{domain}.{t}" for t in op_types]
    return _register(keys, OPS, onnx_op, replace, "onnx_converter")


def _register(keys: list[str], table: dict[str, Any], decorator: Callable[..., Any],
              replace: bool, who: str) -> Callable[[F], F]:
    if not keys:
        raise ConverterError(f"{who}: name at least one op")
    taken = [k for k in keys if k in table]
    if taken and not replace:
        first = table[taken[0]]
        raise DuplicateConverterError(
            taken[0], "converter", f"{first.__module__}.{first.__qualname__}", caller(2),
            f"{who}: pass replace=True to put yours in its place")

    def reg(fn: F) -> F:
        decorator(*keys)(fn)
        return fn
    return reg


__all__ = ["ConverterError", "DuplicateConverterError", "aten_converter", "key", "load", "onnx_converter"]
