"""Typed errors. Every message names the op, the tensor, the dim and the fix where they apply."""

from __future__ import annotations

from collections.abc import Iterable


def printable(text: str, *, indent: str = "  ") -> str:
    """``text`` safe to show on a terminal: every character that is not printable (C0 and C1
    controls such as ESC, BEL, CR and DEL, bidi overrides and isolates, zero-width and format
    characters, unassigned code points) written as its Python escape (``\\x1b``, ``\\r``,
    ``\\u202e``). Line breaks stay, and each line after the first starts with ``indent``, so a
    multi-line message stays readable but no string inside it can begin a line of its own.

    >>> print(printable("mesh '\\x1b[31mdp': bad\\nsecond line"))
    mesh '\\x1b[31mdp': bad
      second line
    """
    if text.isprintable():
        return text
    return ("\n" + indent).join(
        line if line.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1]
                                                for c in line)
        for line in text.split("\n"))


class SpmdError(Exception):
    """Base of every error spmdrules raises on bad input.

    Its message may quote what the user gave (a name, a key, a file name, a framework's own
    message); ``str()`` passes it through ``printable``, here and only here, so that no raise
    site can let a terminal control through. A subclass does not override ``__str__``
    (tests/core/test_errors.py checks every one).
    """

    def __str__(self) -> str:
        if len(self.args) == 1 and isinstance(self.args[0], str):
            return printable(self.args[0])  # not KeyError's quoted repr either
        return printable(super().__str__())


class InvalidMeshError(SpmdError, ValueError):
    """A ProcessMesh that cannot exist: ragged ids, duplicates, bad dim names."""


class InvalidDistAttrError(SpmdError, ValueError):
    """A DistAttr or TensorSpec that is inconsistent with itself, its mesh or its shape."""


class CoShardedDimError(InvalidDistAttrError):
    """The flat `dims_mapping` view was asked for an attribute with a co-sharded dim."""


class ShardingConflictError(SpmdError, ValueError):
    """The inputs of an op ask for shardings that cannot hold together."""


class RuleArgumentError(SpmdError, TypeError):
    """A rule was called with the wrong tensors or attributes."""


class UnsupportedError(SpmdError, NotImplementedError):
    """The op does not support this input (Paddle refuses it too, or it cannot be computed)."""


class OutputPathError(SpmdError, ValueError):
    """An output path that names something other than a regular file: a symbolic link, a
    folder, a FIFO, a device or a socket (spmdrules writes over a regular file or a new name)."""


class RulesImportError(SpmdError, ImportError):
    """The op rules imported under a name other than ``spmdrules.rules``: the repository's
    ``rules/`` folder as a top-level ``rules``, or a source tree that shadows the installed
    package. Each registers the rules a second time or not at all; the message names the fix."""


class UnknownOpError(SpmdError, KeyError):
    """No rule is registered under this name."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"no SPMD rule is registered for op {name!r}.{hint} "
            "Call spmdrules.list_rules() for every name."
        )


class DuplicateRegistrationError(SpmdError, ValueError):
    """A name registered twice in one of the op tables (rules, shapes, kernels, VJPs, verify
    cases, lowerings, converters): the message names the op, the table and where each of the
    two registrations came from."""

    def __init__(self, op: str, table: str, first: str, second: str, fix: str = "") -> None:
        self.op = op
        self.table = table
        self.first = first
        self.second = second
        super().__init__(
            f"{op!r}: a {table} is already registered for it, at {first}; the second "
            f"registration, at {second}, would replace it. "
            + (fix or "Give the new op another name, or remove one of the two registrations"))


def did_you_mean(word: str, choices: Iterable[str], n: int = 2) -> str:
    """``"; did you mean 'a', 'b'?"`` for the choices closest to a misspelt ``word``, else ``""``
    (appended to an error that names an unknown attribute, op, tensor or dtype)."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=n)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""
