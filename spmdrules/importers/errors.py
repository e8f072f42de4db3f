"""Typed errors of the importers: each names the node of the source model and the fix."""

from __future__ import annotations

from spmdrules.core.errors import SpmdError


class ImporterError(SpmdError, ValueError):
    """Base of every error about a model that an importer cannot represent."""


class MissingExtraError(ImporterError, ImportError):
    """The framework an importer reads is not installed (an optional extra)."""


class UnmappedOpError(ImporterError):
    """An op of the source model has no registered op to map onto."""

    def __init__(self, node: str, op: str, nearest: list[str], why: str = "") -> None:
        self.node = node
        self.op = op
        self.nearest = nearest
        near = f"; the nearest supported ops are {', '.join(nearest)}" if nearest else ""
        reason = f" ({why})" if why else ""
        super().__init__(f"node {node!r}: op {op} cannot be mapped onto a registered op{reason}"
                         f"{near}. Rewrite the model around it, or add the op (docs/architecture.md"
                         " 'Adding an op family')")


class DynamicShapeError(ImporterError):
    """A tensor's shape is symbolic: spmdrules plans static shapes only."""


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
