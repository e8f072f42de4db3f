"""Typed errors of the whole-model layer: building, validating and annotating a Graph.

Every message names the node (op or tensor), the dim where one applies, and the fix.
"""

from __future__ import annotations

from spmdrules.core.errors import SpmdError, UnknownOpError


class GraphError(SpmdError, ValueError):
    """Base of every error about a graph: its ops, tensors, shapes and annotations."""


class GraphUnknownOpError(GraphError, UnknownOpError):
    """An op node names no registered rule (or a gradient rule, which is not a graph op)."""

    def __init__(self, node: str, op_type: str, suggestions: list[str], why: str = "") -> None:
        self.node = node
        self.name = op_type
        self.suggestions = suggestions
        hint = f" Did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        reason = why or "no SPMD rule is registered under that name"
        Exception.__init__(
            self,
            f"op {node!r}: unknown op type {op_type!r} ({reason}).{hint} "
            "spmdrules.graph.ops.names() lists every graph op.",
        )


class ArityError(GraphError, TypeError):
    """An op got the wrong number or kind of tensor arguments."""


class OpAttributeError(GraphError, TypeError):
    """An op attribute is unknown, missing or of the wrong type."""


class ShapeError(GraphError):
    """Shapes or dtypes that the op cannot take, or a declared shape the op does not produce."""


class GraphCycleError(GraphError):
    """The graph has a cycle, so no op order exists."""


class DuplicateNameError(GraphError):
    """Two ops or two tensors share one name."""


class InvalidNameError(GraphError):
    """An op or tensor name that is not a str of letters, digits and ``_ . - / : [ ]``."""


class UnknownNodeError(GraphError, KeyError):
    """A name that is not an op or tensor of this graph."""


class UnknownTensorError(UnknownNodeError):
    """A name or handle that is not a tensor of this graph."""


class ProducerError(GraphError):
    """A tensor with no producer that is not an input, or one that two ops (or an op and the
    graph's inputs) both claim to produce."""


class GraphContextError(GraphError, RuntimeError):
    """An op was built outside any graph, or on tensors of two different graphs."""


# ---- annotations ------------------------------------------------------------------------------
class AnnotationError(GraphError):
    """A `shard(...)` annotation that cannot hold for its tensor and mesh."""


class SpecRankError(AnnotationError):
    """The spec has the wrong length: one entry per tensor dim, or one placement per mesh dim."""


class UnknownMeshDimError(AnnotationError):
    """The spec names a mesh dim the mesh does not have (or an index out of range)."""


class MeshDimReusedError(AnnotationError):
    """One mesh dim shards two tensor dims, or both shards and is partial."""


class InvalidSpecError(AnnotationError, TypeError):
    """A spec entry, partial or priority of the wrong kind."""
