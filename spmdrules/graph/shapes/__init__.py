"""Shape and dtype inference for every graph op, following numpy's and Paddle's semantics.

``shape_rule`` is the contract (``TensorMeta``, ``ShapeRule``, the ``SHAPE_RULES`` table and
``infer_meta``); each other module is one op family, named as in ``rules/``, and adds its rows to
the table when imported here.
"""

from spmdrules.core.families import import_families
from spmdrules.graph.shapes.shape_rule import (
    DTYPE_BYTES,
    DTYPES,
    GENERIC_OPS,
    SHAPE_RULES,
    Arg,
    OutMeta,
    OutShape,
    Shape,
    ShapeContext,
    ShapeRule,
    TensorMeta,
    has_shape_rule,
    infer,
    infer_meta,
    promote,
)

__all__ = [
    "DTYPES",
    "DTYPE_BYTES",
    "GENERIC_OPS",
    "SHAPE_RULES",
    "Arg",
    "OutMeta",
    "OutShape",
    "Shape",
    "ShapeContext",
    "ShapeRule",
    "TensorMeta",
    "has_shape_rule",
    "infer",
    "infer_meta",
    "promote",
    *import_families(__name__, __path__, besides={"shape_rule"}),
]
