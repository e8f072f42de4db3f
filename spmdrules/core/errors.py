"""Typed errors. Every message names the op, the tensor, the dim and the fix where they apply."""

from __future__ import annotations

from collections.abc import Iterable


class SpmdError(Exception):
    """Base of every error spmdrules raises on bad input."""


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

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


def did_you_mean(word: str, choices: Iterable[str], n: int = 2) -> str:
    """``"; did you mean 'a', 'b'?"`` for the choices closest to a misspelt ``word``, else ``""``
    (appended to an error that names an unknown attribute, op, tensor or dtype)."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=n)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""
