"""Typed errors of the importers: each names the node of the source model and the fix."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.errors import SpmdError
from spmdrules.graph import errors as graph_errors


class ImporterError(SpmdError, ValueError):
    """Base of every error about a model that an importer cannot represent."""


class MissingExtraError(ImporterError, ImportError):
    """The framework an importer reads is not installed (an optional extra)."""


class UnmappedOpError(ImporterError):
    """An op of the source model has no registered op to map onto.

    ``nearest`` are the forward ops of the rule family that serves a similar computation
    (``spmdrules.importers.families``: by the op's name and ``categories``, its source
    framework's own categories such as torch's ``pointwise`` tag, and ``like``, its mapped ops
    of the same arguments), ``family`` that family. ``nearest`` given is not used: it was the
    mapped ops closest by spelling, which the family replaces."""

    def __init__(self, node: str, op: str, nearest: list[str] | None = None, why: str = "", *,
                 base: str | None = None, categories: Sequence[str] = (),
                 like: Sequence[str] = ()) -> None:
        from spmdrules.importers import families

        self.node = node
        self.op = op
        self.why = why
        self.base = base or families.base_name(op)
        self.categories, self.like = tuple(categories), tuple(like)
        self.family, self.nearest = families.suggest(self.base, categories, like)
        reason = f" ({why})" if why else ""
        super().__init__(f"node {node!r}: op {op} cannot be mapped onto a registered op{reason}; "
                         f"{families.describe(self.base, categories, like)}. "
                         "Rewrite the model around it, or map it with a converter "
                         "(docs/importers.md, 'Converters from user code')")


class DynamicShapeError(ImporterError):
    """A tensor's shape is symbolic: spmdrules plans static shapes only."""


class InvalidModelError(ImporterError):
    """The model breaks its own format's rules (``onnx.checker`` refuses it, an initializer's
    data disagrees with its dims, an opset no release defines): it is malformed."""


class GraphCycleError(InvalidModelError, graph_errors.GraphCycleError):
    """A node of the model reads a value computed from its own output (the graph layer's
    ``GraphCycleError`` for a model's graph: one ``except`` catches both)."""


class InvalidDimError(ImporterError):
    """A tensor dim spmdrules cannot plan: negative, zero (an empty tensor), or 2**62 and more
    (beyond what an int64 index and the model file hold)."""


class UnsupportedDtypeError(ImporterError):
    """A tensor's element type has no spmdrules dtype (complex, string, uint64, float8...)."""


class ExternalDataError(ImporterError):
    """A tensor's data lives in a file the importer may not or cannot read: outside the model's
    folder, through a link, missing, or with no folder given for an in-memory model."""


class ControlFlowError(ImporterError):
    """The program branches or loops on data (cond, while_loop, map)."""


class InPlaceMutationError(ImporterError):
    """The program writes into one of its inputs, parameters or buffers."""


class UnsafeArchiveError(ImporterError):
    """A model file holds an entry that reading it would unpickle or load as code."""

    def __init__(self, file: str, entry: str, what: str, fix: str) -> None:
        self.file = file
        self.entry = entry
        super().__init__(f"{file}: entry {entry!r} {what}, and spmdrules never unpickles a model "
                         f"file or loads code from it; {fix}")
