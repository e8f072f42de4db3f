"""ONNX values as the importer holds them: element types as graph dtypes, tensors' data as numpy
arrays, dims as sizes the graph can plan, constants known at import time (``Static``).

Each refusal is typed and names the tensor: an element type with no graph dtype
(``UnsupportedDtypeError``), a tensor whose data disagrees with its dims or type
(``InvalidModelError``), a dim below 1 or of 2**62 and more (``InvalidDimError``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spmdrules.graph import ops
from spmdrules.graph.exchange import MAX_DIM
from spmdrules.graph.nodes import Tensor
from spmdrules.importers.errors import (
    ExternalDataError,
    InvalidDimError,
    InvalidModelError,
    UnsupportedDtypeError,
)

#: the walk's state (``onnx_graph.Importer``: graph, env, opset, options)
Importer = Any

#: ONNX TensorProto element types -> graph dtypes
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
          10: "float16", 11: "float64", 16: "bfloat16"}
_SAFE = re.compile(r"[^A-Za-z0-9_.\-/:\[\]]")


def safe_name(name: str) -> str:
    """An ONNX value name as a graph name (characters the graph refuses become ``_``)."""
    s = _SAFE.sub("_", name) or "_"
    return s if re.match(r"[A-Za-z0-9_]", s) else f"_{s}"


def _type_name(onnx: Any, elem_type: int) -> str:
    try:
        return str(onnx.helper.tensor_dtype_to_string(elem_type)).removeprefix("TensorProto.")
    except Exception:
        return f"element type {elem_type}"


def graph_dtype(onnx: Any, elem_type: int, what: str) -> str:
    """The graph dtype of an ONNX element type; ``what`` names the tensor in the refusal."""
    if elem_type not in DTYPES:
        raise UnsupportedDtypeError(
            f"{what}: ONNX type {_type_name(onnx, elem_type)} ({elem_type}) has no spmdrules "
            f"dtype; the supported types are {', '.join(sorted(set(DTYPES.values())))}. Cast "
            "it to one of them in the model")
    return DTYPES[elem_type]


def array(onnx: Any, tensor: Any, what: str) -> np.ndarray:
    """A TensorProto's data with its dims and type, or a typed refusal naming it (its type is
    checked where it is used as data: ``Static.tensor``)."""
    if onnx.external_data_helper.uses_external_data(tensor):
        # the reader loads it from the model's folder first: never from the working directory
        raise ExternalDataError(f"{what}: its data is external and was not loaded")
    try:
        value = np.asarray(onnx.numpy_helper.to_array(tensor))
    except Exception as e:
        raise InvalidModelError(
            f"{what}: its data does not hold its dims {list(tensor.dims)} of "
            f"{_type_name(onnx, tensor.data_type)}: {type(e).__name__}: {e}") from e
    if list(value.shape) != list(tensor.dims):
        raise InvalidModelError(f"{what}: dims {list(tensor.dims)}, but its data reads as "
                                f"{list(value.shape)}")
    return value


def check_dims(shape: Sequence[int], what: str, fix: str = "") -> list[int]:
    """``shape`` when every dim is a size the graph plans: 1 <= dim < 2**62."""
    for i, d in enumerate(shape):
        if d < 1 or d > MAX_DIM:
            why = ("is negative: no tensor has such a size" if d < 0 else
                   "is 0: an empty tensor, which spmdrules does not plan" if d == 0 else
                   f"is 2**62 or more: beyond the largest dim ({MAX_DIM}) an int64 index and "
                   "the model file hold")
            raise InvalidDimError(f"{what}: dim {i} of {list(shape)} {why}"
                                  f"{'; ' + fix if fix else ''}")
    return [int(d) for d in shape]


@dataclass
class Static:
    """A value known at import time: an initializer, a Constant, or a node folded at import
    (``onnx_fold``). Read as a shape it folds into an attribute; read as data it becomes a source
    named after it (once): an initializer a parameter (``param``), any other constant a ``full``
    when all its elements are one value (exact for integers), else a named constant source."""

    name: str
    value: np.ndarray
    made: list[Tensor] = field(default_factory=list)
    #: an initializer: its value is the model's (a parameter: never folded into another value)
    param: bool = False

    def dtype(self) -> str:
        """The graph dtype of the value."""
        name = {np.dtype(np.bool_): "bool"}.get(self.value.dtype, str(self.value.dtype))
        if name not in DTYPES.values():
            raise UnsupportedDtypeError(
                f"tensor {self.name!r}: type {name} has no spmdrules dtype; the supported "
                f"types are {', '.join(sorted(set(DTYPES.values())))}")
        return name

    def tensor(self, imp: Importer) -> Tensor:
        if not self.made and not self.param and self.value.size and (
                self.value == self.value.reshape(-1)[0]).all():
            # .item() keeps an integer a Python int: full carries it exactly (not as a float)
            item = self.value.reshape(-1)[0].item()
            op = ops.call("full", shape=check_dims(self.value.shape, f"tensor {self.name!r}"),
                          value=int(item) if isinstance(item, bool | int) else float(item),
                          dtype=self.dtype(), name=safe_name(self.name))
            out = op.results[0]
            assert isinstance(out, Tensor)
            self.made.append(out)
        if not self.made:
            v = self.value
            t = imp.graph.param(safe_name(self.name),
                                check_dims(v.shape, f"tensor {self.name!r}"), self.dtype())
            imp.imported.values[t.name] = v
            self.made.append(t)
        return self.made[0]


@dataclass
class Empty:
    """A value with a dim of 0: no graph tensor (spmdrules plans no empty tensor). A Slice that
    keeps nothing gives one (Phi-3 cuts the pass-through part of a rotary embedding that covers
    the whole head); Concat drops it; any other reader is refused, naming it."""

    name: str
    shape: list[int]

    def tensor(self, imp: Importer) -> Tensor:
        raise InvalidDimError(f"tensor {self.name!r} has shape {self.shape}: an empty tensor, "
                              "which spmdrules does not plan (only a Concat may read it, and "
                              "drops it)")


__all__ = ["DTYPES", "Empty", "Static", "array", "check_dims", "graph_dtype", "safe_name"]
