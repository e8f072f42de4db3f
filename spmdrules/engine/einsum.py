"""The Einsum engine: a compute op is described once by its notation, e.g. ``mk,kn->mn``.

Each tensor dim gets a letter. Forward inference merges the inputs' mesh dims per letter, then reads
the outputs' mappings off the merged letters and marks outputs partial on the mesh dims of letters
that were contracted away, as the inputs the op computes with split them (``contracted_partial``).
Reverse inference merges the outputs' mappings and reads the inputs' off them. The policy for
conflicts is the op's own choice, passed as options:

* a replicated dim yields to a sharded one (always);
* one letter on two mesh dims: ``"error"`` (most ops), ``"coshard"`` (matmul, bmm: the letter is split
  over both, in the order met) or ``"first"`` (the first tensor's choice stands);
* one mesh dim on two letters: the letter that comes first in ``priority`` keeps it (by default, the
  first letter met in argument order).

A mapping here is the canonical multi-dims form: a tuple, per tensor dim, of mesh dims (major first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from spmdrules.core.errors import RuleArgumentError, ShardingConflictError

MeshDims = tuple[int, ...]
Mapping_ = tuple[MeshDims, ...]
LetterMap = dict[str, MeshDims]
AxisConflict = Literal["error", "coshard", "first"]

ALPHABET: Final = "abcdefghijlopqrstuvwxyz"  # k, m, n are kept for matrix products
BROADCAST: Final = "1"  # the letter of a size-1 dim that broadcasts


@dataclass(frozen=True, slots=True)
class Notation:
    """A parsed ``in1,in2->out1,out2`` equation: one string of letters per tensor."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __str__(self) -> str:
        return ",".join(self.inputs) + "->" + ",".join(self.outputs)

    @property
    def contracted(self) -> frozenset[str]:
        """Letters of the inputs that no output keeps."""
        out = set("".join(self.outputs))
        return frozenset(c for c in "".join(self.inputs) if c not in out and c != BROADCAST)


def parse(equation: str) -> Notation:
    """Parse ``"ij,jk->ik"``. Errors point at the offending character.

    >>> parse("bmk,bkn->bmn")
    Notation(inputs=('bmk', 'bkn'), outputs=('bmn',))
    >>> parse("a b->a")
    Traceback (most recent call last):
    ...
    spmdrules.core.errors.RuleArgumentError: einsum notation 'a b->a': character ' ' at position 1 ...
        a b->a
         ^
    """
    if not isinstance(equation, str):
        raise RuleArgumentError(f"einsum notation must be a str, got {equation!r}")

    def fail(pos: int, why: str) -> RuleArgumentError:
        return RuleArgumentError(
            f"einsum notation {equation!r}: {why}\n    {equation}\n    {' ' * pos}^"
        )

    arrow = equation.find("->")
    if arrow < 0:
        raise fail(len(equation), "missing '->'; write the outputs explicitly, e.g. 'ij,jk->ik'")
    if equation.find("->", arrow + 2) >= 0:
        raise fail(equation.find("->", arrow + 2), "more than one '->'")
    for pos, ch in enumerate(equation):
        if pos in (arrow, arrow + 1) or ch == ",":
            continue
        if ch == ".":
            raise fail(pos, "ellipsis '...' is not supported here; spell out the broadcast letters")
        if not (ch.isascii() and ch.isalpha()) and ch != BROADCAST:
            raise fail(pos, f"character {ch!r} at position {pos} is not a letter")
    lhs, rhs = equation[:arrow], equation[arrow + 2 :]
    inputs = tuple(lhs.split(","))
    outputs = tuple(rhs.split(",")) if rhs else ("",)
    if lhs == "":
        raise fail(0, "no input operands")
    seen_in = set(lhs.replace(",", ""))
    offset = arrow + 2
    for o in outputs:
        for j, ch in enumerate(o):
            if ch not in seen_in:
                raise fail(offset + j, f"output letter {ch!r} does not appear in any input")
            if o.count(ch) > 1:
                raise fail(offset + j, f"output letter {ch!r} repeats within one output")
        offset += len(o) + 1
    return Notation(inputs, outputs)


def broadcast_notations(shapes: Sequence[Sequence[int]]) -> tuple[tuple[str, ...], str]:
    """Right-aligned broadcasting letters for elementwise ops; size-1 dims that broadcast get '1'.

    >>> broadcast_notations([(8, 1, 4), (3, 4)])
    (('a1c', 'bc'), 'abc')
    >>> broadcast_notations([(1, 4), (9, 16, 4)])
    (('1c', 'abc'), 'abc')
    """
    ndim = max((len(s) for s in shapes), default=0)
    if ndim > len(ALPHABET):
        raise RuleArgumentError(f"broadcasting over {ndim} dims exceeds the {len(ALPHABET)} letters")
    letters = ALPHABET[:ndim]
    out_sizes = [1] * ndim
    for s in shapes:
        off = ndim - len(s)
        for i, n in enumerate(s):
            if n != 1:
                out_sizes[off + i] = n
    nots = []
    for s in shapes:
        off = ndim - len(s)
        nots.append(
            "".join(
                BROADCAST if n == 1 and out_sizes[off + i] != 1 else letters[off + i]
                for i, n in enumerate(s)
            )
        )
    return tuple(nots), letters


def merge(
    operands: Iterable[tuple[str, Mapping_]],
    *,
    on_axis_conflict: AxisConflict = "error",
    names: Sequence[str] | None = None,
) -> LetterMap:
    """Merge per-letter mesh dims over the operands, in order.

    Broadcast ('1') dims take part like one shared letter, as in Paddle: a size-1 dim sharded on mesh
    dim m keeps m from the letters met after it, though it is itself replicated in every result.
    """
    # Letters enter the map when they first become sharded, so that its order is the order in
    # which mesh dims were claimed: resolve_mesh_conflicts gives a contested mesh dim to the first.
    letter_map: LetterMap = {}
    ops = operands if isinstance(operands, list) else list(operands)
    for t, (letters, mapping) in enumerate(ops):
        for i, ch in enumerate(letters):
            dims = mapping[i]
            if not dims:
                continue
            prev = letter_map.get(ch)
            if prev is None:
                letter_map[ch] = dims
            elif dims != prev:
                if on_axis_conflict == "error":
                    raise _conflict(ops, names, ch, (t, i), prev, dims)
                if on_axis_conflict == "coshard":
                    letter_map[ch] = prev + tuple(d for d in dims if d not in prev)
                # "first": the earlier choice stands
    return letter_map


def _conflict(operands: Sequence[tuple[str, Mapping_]], names: Sequence[str] | None, ch: str,
              at: tuple[int, int], prev: MeshDims, dims: MeshDims) -> ShardingConflictError:
    """The error for letter ``ch`` sharded by ``dims`` at (operand, dim) ``at``, by ``prev``
    where it was first sharded: it names both tensors and dims."""
    (t0, i0), (t, i) = _first_claim(operands, ch), at
    n0, n1 = (repr(names[t0]), repr(names[t])) if names else (f"operand {t0}", f"operand {t}")
    if ch == BROADCAST:
        return ShardingConflictError(
            f"size-1 dims {n0} dim {i0} and {n1} dim {i} are sharded by different mesh dims "
            f"{list(prev)} and {list(dims)}; a size-1 dim holds nothing to split: replicate it (-1)"
        )
    who = f"tensor {n1}" if names else n1
    return ShardingConflictError(
        f"tensor axis {ch!r} ({who} dim {i}) is sharded by mesh dims {list(prev)} and "
        f"{list(dims)} ({n0} dim {i0} has {list(prev)}); shard that dim the same way in every "
        "input, or replicate it in all but one"
    )


def _first_claim(operands: Sequence[tuple[str, Mapping_]], ch: str) -> tuple[int, int]:
    """(operand, dim) of the first shard of letter ``ch``, for an error."""
    for t, (letters, mapping) in enumerate(operands):
        for i, c in enumerate(letters):
            if c == ch and mapping[i]:
                return t, i
    return 0, 0


def refuse_shared_mesh_dims(operands: Sequence[tuple[str, Mapping_]],
                            names: Sequence[str]) -> None:
    """Raise where one mesh dim shards two letters (the op cannot choose between them); the
    error names both tensors and dims."""
    owner: dict[int, tuple[str, int, int]] = {}  # mesh dim -> (letter, operand, dim)
    for t, (letters, mapping) in enumerate(operands):
        for i, (ch, dims) in enumerate(zip(letters, mapping, strict=True)):
            for d in dims if ch != BROADCAST else ():
                ch0, t0, i0 = owner.setdefault(d, (ch, t, i))
                if ch0 != ch:
                    raise ShardingConflictError(
                        f"mesh dim {d} shards both {names[t0]!r} dim {i0} and {names[t]!r} dim "
                        f"{i}; the op cannot split two dims on one mesh dim. Replicate one of them"
                    )


def resolve_mesh_conflicts(letter_map: LetterMap, priority: str | None = None) -> LetterMap:
    """Give each mesh dim to one letter only: the first in ``priority`` (default: insertion order).

    >>> resolve_mesh_conflicts({"m": (0,), "n": (0,)}, priority="nm")
    {'m': (), 'n': (0,)}
    """
    order = list(letter_map) if priority is None else [c for c in priority if c in letter_map]
    if priority is not None:
        order += [c for c in letter_map if c not in order]
    owner: dict[int, str] = {}
    out = dict(letter_map)
    for ch in order:
        dims = out[ch]
        if not dims:
            continue
        kept = tuple(d for d in dims if owner.setdefault(d, ch) == ch)
        if kept != dims:
            out[ch] = kept
    return out


def mapping_for(
    letters: str, letter_map: Mapping[str, MeshDims], shape: Sequence[int] | None = None
) -> Mapping_:
    """The mapping of a tensor with these letters; unknown and broadcast letters are replicated.

    With ``shape``, size-1 dims are replicated too: there is nothing to split.
    """
    get = letter_map.get
    if shape is None:
        return tuple(get(ch, ()) if ch != BROADCAST else () for ch in letters)
    return tuple(
        get(ch, ()) if ch != BROADCAST and n != 1 else () for ch, n in zip(letters, shape, strict=True)
    )


def contracted_partial(
    operands: Iterable[tuple[str, Mapping_]], out_letters: str, reduce_type: str = "sum"
) -> tuple[tuple[int, str], ...]:
    """Partial items for an output computed from ``operands`` (each one's letters and the mapping
    the op computes it with): the mesh dims on which some operand splits a letter the output does
    not keep. Read off the operands, not the merged letters: a contracted letter's mesh dim that
    the operands dropped (a size-1 dim, or a letter made whole) splits nothing, every local result
    is already the whole sum, and declaring it pending would sum it once per process.

    >>> contracted_partial([("mk", ((0,), (1,))), ("kn", ((1,), ()))], "mn")
    ((1, 'sum'),)
    >>> contracted_partial([("mk", ((), ())), ("kn", ((), ()))], "mn")  # k of size 1, dropped
    ()
    """
    dims = {d for letters, mapping in operands
            for ch, ds in zip(letters, mapping, strict=True)
            if ch not in out_letters and ch != BROADCAST for d in ds}
    return tuple((d, reduce_type) for d in sorted(dims))


def drop_indivisible(
    letter_map: LetterMap,
    sizes: Mapping[str, int],
    mesh_shape: Sequence[int],
    letters: Iterable[str] | None = None,
) -> LetterMap:
    """Unshard letters whose size is not divisible by the product of their mesh dims."""
    out = dict(letter_map)
    for ch in out if letters is None else letters:
        dims = out.get(ch)
        if not dims:
            continue
        n = 1
        for d in dims:
            n *= mesh_shape[d]
        if sizes.get(ch, 0) % n != 0:
            out[ch] = ()
    return out


def letter_sizes(operands: Iterable[tuple[str, Sequence[int]]]) -> dict[str, int]:
    """Each letter's size, read from the first operand that has it with a size other than 1."""
    sizes: dict[str, int] = {}
    for letters, shape in operands:
        for ch, n in zip(letters, shape, strict=False):
            if ch != BROADCAST and (ch not in sizes or sizes[ch] == 1):
                sizes[ch] = n
    return sizes
