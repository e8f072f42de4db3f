"""An op described once, as data: letters per tensor plus a small policy; both directions derived.

A ``Description`` is what Shardy calls an op's sharding rule. It gives every dim of every tensor a
letter (the Einsum notation, one string per tensor) and states the op's policy in a few fields:

* ``whole``: letters no tensor may shard (a sliced, scanned, sorted or tiled axis);
* ``pending``: the reduce type of an output whose inputs shard a letter it does not keep (a gather
  from a row-sharded table is a pending sum over the rows' mesh dims); ``None`` makes every such
  letter whole instead;
* ``on_axis_conflict`` and ``priority``: one letter on two mesh dims, one mesh dim on two letters,
  exactly as in :mod:`spmdrules.engine.einsum`;
* ``merge``: which inputs' mappings decide the letters, in the order they are merged (default
  all, in argument order; an index operand whose layout the op ignores is left out);
* ``mask``: an output letter that masks those pending sums (a lookup: each row is read by the
  one process that holds it, the others read zeros), where one mesh dim splits the letter;
* ``linear``: inputs the op is linear in, whose pending sums pass to the outputs unchanged;
* ``divisible``: replicate a letter whose size its mesh dims do not divide;
* ``claimed``: letters that merge (claim mesh dims, conflict) but are whole in every answer;
* ``grouped``: letters of different sizes in different tensors (grouped-query heads), kept
  only where their mesh dims divide every size; ``grouped_guard`` names a given tensor's dim
  whose uneven split makes them whole;
* ``reverse_merge``: the tensors (inputs, then outputs) whose letters decide in reverse;
* ``replicated_dims``: dims of given tensors that merge but are replicated (a broadcast mask);
* ``contraction``: a product of two operands (matmul, bmm), whose merge is the policy of
  :class:`spmdrules.engine.contraction.Contraction` instead of the fields above;
* ``reading``: how the merged tensors' mappings are read first (Paddle's einsum reads a
  co-sharded dim as its major mesh dim, and one factor of an outer product as replicated);
* ``claim_broadcast``: a ``'1'`` dim's shard still claims its mesh dim (Paddle's shared ``'1'``
  letter: it is never sharded itself, but it keeps its mesh dim from the other letters, and two
  ``'1'`` dims on different mesh dims conflict); by default a ``'1'`` dim takes no part;
* ``policy``: Paddle's choices beyond the letters, as named fields of one typed
  :class:`spmdrules.engine.policy.Policy` (which pending results pass, whether a masked sum
  stays masked, which inputs are not read, what an uneven mean does).

An op registers a ``describe`` function from the call's shapes and attributes to its Description
(``register_described``); forward inference merges the inputs' letters and reads every tensor off
them, reverse inference merges the outputs' letters and reads the inputs off them. A family is
then its notation plus its policy, never two hand-written directions::

    register_described(
        "cumsum", lambda x, *, axis, **_: Description.of(..., whole=letter(axis)), ...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import contraction as products
from spmdrules.engine import einsum
from spmdrules.engine.align import align
from spmdrules.engine.contraction import Contraction, OperandReading
from spmdrules.engine.einsum import ALPHABET, AxisConflict, LetterMap
from spmdrules.engine.grouped import grouped_sizes, guard_uneven, ungrouped
from spmdrules.engine.policy import PLAIN, Policy

#: one tensor argument's letters: a string, None for an absent optional, a tuple for a list
Letters = str | None | tuple[str, ...]
#: one tensor argument as a rule receives it
Arg = TensorSpec | None | tuple[TensorSpec, ...]
#: one tensor argument's global shape, in the same structure
ShapeArg = tuple[int, ...] | None | tuple[tuple[int, ...], ...]



@dataclass(frozen=True, slots=True)
class Description:
    """One call of an op: letters per tensor argument and output, and the op's policy."""

    inputs: tuple[Letters, ...]
    outputs: tuple[Letters, ...]
    whole: frozenset[str] = frozenset()
    pending: str | None = "sum"
    #: the output letter whose index says which process holds each slice of a pending sum that
    #: one mesh dim's split of a letter gives (``spmdrules.engine.masks``); None: plain sums
    mask: str | None = None
    on_axis_conflict: AxisConflict = "error"
    priority: str | None = None
    merge: tuple[int, ...] | None = None
    linear: tuple[int, ...] = ()
    divisible: bool = False
    claim_broadcast: bool = False
    #: letters that take part in the merge (they claim mesh dims, and a letter sharded two ways
    #: is the op's conflict) but are whole in every answer (Paddle unshards them after merging)
    claimed: frozenset[str] = frozenset()
    #: letters whose size differs between tensors (grouped-query heads: q has h of them, k and v
    #: h/g): a block of one pairs with the other's only when the letter's mesh dims divide every
    #: size it has, else the letter is whole
    grouped: frozenset[str] = frozenset()
    #: (argument, dim), arguments indexed over inputs + outputs: when that given tensor's dim is
    #: split by a count its size does not divide, every grouped letter is whole (Paddle's flash
    #: attention reads k's heads so, in both directions)
    grouped_guard: tuple[int, int] | None = None
    #: the tensors whose letters decide in reverse, as indices into inputs + outputs (default:
    #: every output, in order)
    reverse_merge: tuple[int, ...] | None = None
    #: (argument, dim) pairs, arguments indexed over inputs + outputs, that merge but are
    #: replicated in the answer (a mask's size-1 heads dim, which broadcasts)
    replicated_dims: frozenset[tuple[int, int]] = frozenset()
    #: what the results keep of pending sums and masks, and which inputs are not read
    #: (:class:`spmdrules.engine.policy.Policy`)
    policy: Policy = PLAIN
    #: a product of two operands, merged by this policy (``spmdrules.engine.contraction``)
    contraction: Contraction | None = None
    #: how Paddle reads the merged tensors' mappings (its einsum rule's quirks)
    reading: OperandReading | None = None
    #: names of the tensor arguments and outputs, for errors (filled by register_described)
    names: tuple[str, ...] = field(default=(), compare=False)

    @staticmethod
    def of(notation: str, **policy: Any) -> Description:
        """A description from an ``in1,in2->out`` notation (every argument a single tensor).

        >>> Description.of("ab->ab", whole="b").whole
        frozenset({'b'})
        """
        nota = einsum.parse(notation)
        whole = policy.pop("whole", "")
        return Description(nota.inputs, nota.outputs, whole=frozenset(whole), **policy)


def letters(n: int, skip: str = "") -> str:
    """``n`` distinct letters, avoiding ``skip``: the dims of a rank-``n`` tensor."""
    pool = [c for c in ALPHABET + "kmn" if c not in skip]
    if n > len(pool):
        raise RuleArgumentError(f"a tensor of rank {n} has more dims than the notation has letters")
    return "".join(pool[:n])


# ---- the two directions ------------------------------------------------------------------------
def _flat(
    letter_args: Sequence[Letters], args: Sequence[Arg], names: Sequence[str], side: str
) -> list[tuple[int, str, TensorSpec, str]]:
    """(argument index, letters, spec, name) per present tensor; ranks checked."""
    out: list[tuple[int, str, TensorSpec, str]] = []
    if len(letter_args) != len(args):
        raise RuleArgumentError(
            f"the description names {len(letter_args)} {side} but {len(args)} were given"
        )
    for i, (ls, a) in enumerate(zip(letter_args, args, strict=True)):
        name = names[i] if i < len(names) else f"{side} {i}"
        if a is None:
            continue
        if isinstance(a, TensorSpec):
            pairs: Iterable[tuple[str | None, TensorSpec, str]] = [(ls, a, name)]  # type: ignore[list-item]
        else:
            lss = ls if isinstance(ls, tuple) else (ls,) * len(a)
            pairs = [(lj, t, f"{name}[{j}]") for j, (lj, t) in enumerate(zip(lss, a, strict=True))]
        for lj, t, nm in pairs:
            if not isinstance(lj, str):
                raise RuleArgumentError(f"the description gives {nm!r} no letters")
            if len(lj) != len(t.shape):
                raise RuleArgumentError(
                    f"{nm!r} has rank {len(t.shape)} but the op's notation gives it "
                    f"{len(lj)} dims ({lj!r}); pass a tensor of rank {len(lj)}"
                )
            out.append((i, lj, t, nm))
    return out


def _blank(ls: str, m: MultiDims, whole: frozenset[str], claim: bool = False) -> MultiDims:
    """The mapping without the whole letters' shards and, unless they ``claim`` their mesh dims,
    the broadcast ('1') dims' (a size-1 dim that broadcasts has no block to split)."""
    if not whole and ("1" not in ls or claim):
        return m
    return tuple(() if ch in whole or (ch == "1" and not claim) else dims
                 for ch, dims in zip(ls, m, strict=True))


def _letter_map(
    desc: Description, flat: Sequence[tuple[int, str, TensorSpec, str]], sources: Iterable[int] | None,
    every: Sequence[tuple[int, str, TensorSpec, str]] = (), reverse: bool = False,
) -> LetterMap:
    # in the order ``merge`` gives them: the first to claim a mesh dim keeps it
    chosen = list(flat) if sources is None else [f for i in sources for f in flat if f[0] == i]
    sizes_of = grouped_sizes(desc.grouped, every or flat, desc.replicated_dims) \
        if desc.grouped else None
    whole = desc.whole
    if desc.grouped and guard_uneven(desc.grouped_guard, every or flat):
        whole = whole | desc.grouped
    claim = desc.claim_broadcast or (reverse and desc.policy.reverse_claims_broadcast)
    lm = _merged(desc, chosen, whole, claim)
    if sizes_of:
        lm = ungrouped(lm, sizes_of, chosen[0][2].attr.mesh.shape if chosen else ())
    return _kept_letters(desc, lm, flat)


def _kept_letters(desc: Description, lm: LetterMap,
                  flat: Sequence[tuple[int, str, TensorSpec, str]]) -> LetterMap:
    """The merged letters less those the op claims for itself, and (``divisible``, the
    policy's ``even``) those whose split would be uneven."""
    if desc.claimed:
        lm = {ch: dims for ch, dims in lm.items() if ch not in desc.claimed}
    if desc.divisible or desc.policy.even:
        sizes = einsum.letter_sizes((ls, t.shape) for _, ls, t, _ in flat)
        lm = einsum.drop_indivisible(lm, sizes, flat[0][2].attr.mesh.shape if flat else (),
                                     None if desc.divisible else desc.policy.even)
    return lm


def _merged(desc: Description, chosen: Sequence[tuple[int, str, TensorSpec, str]],
            whole: frozenset[str], claim: bool) -> LetterMap:
    """The chosen tensors' letters merged, each mesh dim on one letter (``priority``, or the
    op refuses: ``policy.shared_mesh_dim``), a window op's spatial splits read through its
    windows (``policy.windows``)."""
    operands = _operands(desc, chosen, whole, claim)
    names = [nm for *_, nm in chosen]
    if desc.policy.shared_mesh_dim == "error":
        einsum.refuse_shared_mesh_dims(operands, names)
    lm = einsum.merge(operands, on_axis_conflict=desc.on_axis_conflict, names=names)
    lm = einsum.resolve_mesh_conflicts(lm, desc.priority)
    if desc.policy.windows is not None and chosen:
        lm = desc.policy.windows.read(lm, chosen[0][2].attr.mesh.shape)
    return lm


def _operands(desc: Description, chosen: Sequence[tuple[int, str, TensorSpec, str]],
              whole: frozenset[str], claim: bool) -> list[tuple[str, MultiDims]]:
    """The merged tensors' letters and mappings, as the op reads them."""
    operands = [(ls, _blank(ls, t.attr.multi_dims_mapping, whole, claim))
                for _, ls, t, _ in chosen]
    if desc.reading is not None:
        operands = desc.reading.read(operands, _each(desc.outputs[0]) if desc.outputs else "")
    return operands


def _attr(t: TensorSpec, ls: str, lm: LetterMap, partial: PartialItems = (),
          i: int = -1, replicated: frozenset[tuple[int, int]] = frozenset()) -> DistAttr:
    m = einsum.mapping_for(ls, lm)
    if replicated:
        m = tuple(() if (i, p) in replicated else dims for p, dims in enumerate(m))
    a = t.attr
    if a.multi_dims_mapping == m and a.partial_items == partial:
        return a
    return DistAttr._make(a.mesh, m, partial)


def _rebuild(
    letter_args: Sequence[Letters], args: Sequence[Arg],
    make: Callable[[int, str, TensorSpec], DistAttr],
) -> list[Any]:
    out: list[Any] = []
    for i, (ls, a) in enumerate(zip(letter_args, args, strict=True)):
        if a is None:
            out.append(None)
        elif isinstance(a, TensorSpec):
            assert isinstance(ls, str)
            out.append(make(i, ls, a))
        else:
            lss = ls if isinstance(ls, tuple) else (str(ls),) * len(a)
            out.append(tuple(make(i, lj, t) for lj, t in zip(lss, a, strict=True)))
    return out


def _out_attrs(desc: Description, mesh: ProcessMesh, lm: LetterMap, partial: PartialItems,
               masked: tuple[int, ...] = ()) -> list[Any]:
    """The outputs' attributes read off the merged letters (a list output: a tuple of them);
    ``masked``: the mesh dims of ``partial`` that ``desc.mask`` masks."""
    get = lm.get
    out: list[Any] = []
    for ls in desc.outputs:
        if ls is None:
            out.append(None)
        elif isinstance(ls, str):
            masks = (tuple((d, ls.index(desc.mask)) for d in masked)
                     if masked and desc.mask and desc.mask in ls else ())
            out.append(DistAttr._make(mesh, tuple(get(ch, ()) if ch != "1" else () for ch in ls),
                                      partial, masks))
        else:
            out.append(tuple(DistAttr._make(mesh, einsum.mapping_for(s, lm), partial) for s in ls))
    return out


def infer_forward(desc: Description, args: Sequence[Arg]) -> SpmdInfo:
    """The inputs' letters merged; every tensor read off them; pending letters give partials."""
    if desc.contraction is not None:  # checks its two tensors' ranks itself
        return products.forward(desc.contraction, desc.inputs, desc.outputs, args)
    flat = _flat(desc.inputs, args, desc.names, "inputs")
    if not flat:
        if not desc.inputs:  # a constant: nothing to go on, its consumer places it
            return SpmdInfo((), (None,) * len(desc.outputs))
        raise RuleArgumentError("the op needs at least one tensor argument")
    _refuse(desc.policy.refused, flat)
    if desc.policy.align:
        return _aligned_forward(desc, args, flat)
    lm, partial, masked = _pending(desc, _letter_map(desc, flat, desc.merge))
    linear_partial = _linear_partials(desc, args, lm, partial) if desc.linear else {}
    out_partial: PartialItems = tuple(sorted(partial.items())) if partial else ()
    rep = desc.replicated_dims
    unread = desc.policy.unread
    ins = _rebuild(desc.inputs, args, lambda i, ls, t: t.attr if i in unread
                   else _attr(t, ls, lm, linear_partial.get(i, ()), i, rep))
    return SpmdInfo(ins, _out_attrs(desc, flat[0][2].attr.mesh, lm, out_partial, masked))


def _pending(desc: Description, lm: LetterMap) -> tuple[LetterMap, dict[int, str], tuple[int, ...]]:
    """The letters no output keeps: whole (``pending`` None), or pending results over their mesh
    dims, and the mesh dims of those that ``mask`` masks. An op without outputs (Paddle's generic
    rules, whose outputs are a list argument) leaves none."""
    kept = "".join(_each(ls) for ls in desc.outputs)
    contracted = [ch for ch, dims in lm.items() if dims and ch not in kept and ch != "1"]
    if not contracted or not desc.outputs:  # no output to hold a pending result
        return lm, {}, ()
    if desc.pending is None:
        return {ch: (() if ch in contracted else dims) for ch, dims in lm.items()}, {}, ()
    partial = {d: desc.pending for ch in contracted for d in lm[ch]}
    masked: tuple[int, ...] = ()
    if desc.mask is not None and desc.pending == "sum":
        # a letter split over several mesh dims leaves plain sums: a slice is then
        # zero along each of them but on one process of the group, not on one process
        masked = tuple(sorted(lm[ch][0] for ch in contracted if len(lm[ch]) == 1))
    return lm, partial, masked


def _refuse(refused: tuple[tuple[int, str, str], ...],
            flat: Sequence[tuple[int, str, TensorSpec, str]]) -> None:
    """An input that shards a letter the op's kernel cannot split (``policy.refused``)."""
    for arg, ch, why in refused:
        for _, ls, t, nm in (f for f in flat if f[0] == arg):
            for i, dims in enumerate(t.attr.multi_dims_mapping):
                if dims and ls[i] == ch:
                    raise UnsupportedError(
                        f"{nm!r} dim {i} is sharded on mesh dims {list(dims)}, but {why}; "
                        f"replicate {nm} dim {i}"
                    )


def _aligned_forward(desc: Description, args: Sequence[Arg],
                     flat: Sequence[tuple[int, str, TensorSpec, str]]) -> SpmdInfo:
    """The pieces of the merged list argument aligned by cost (``policy.align``); every tensor
    read off the aligned pieces' letters, with the linear pending results they share."""
    i = (desc.merge or (0,))[0]
    pieces = args[i]
    given = desc.inputs[i]
    ls = given[0] if isinstance(given, tuple) else given
    if not isinstance(pieces, tuple) or not isinstance(ls, str):
        raise RuleArgumentError("an aligned description merges one list of tensors")
    aligned = [p for p, ch in enumerate(ls) if ch not in desc.whole | desc.claimed]
    mdm, partial = align(pieces, aligned)
    lm = {ch: dims for ch, dims in zip(ls, mdm, strict=True) if dims}
    ins = _rebuild(desc.inputs, args, lambda j, ls, t: _attr(t, ls, lm, partial))
    return SpmdInfo(ins, _out_attrs(desc, flat[0][2].attr.mesh, lm, partial))


def _linear_partials(desc: Description, args: Sequence[Arg], lm: LetterMap,
                     partial: dict[int, str]) -> dict[int, PartialItems]:
    """The pending results each ``linear`` input keeps (``policy.passed``: on mesh dims no
    letter holds), which the outputs take too (added to ``partial``)."""
    used = {d for ch, dims in lm.items() if ch != "1" for d in dims}
    out = desc.policy.passed(desc.linear, args, used)
    for items in out.values():
        for d, rt in items:
            partial.setdefault(d, rt)
    return out


def infer_reverse(desc: Description, args: Sequence[Arg], outputs: Sequence[Arg]) -> SpmdInfo:
    """The outputs' letters merged; every input read off them; outputs lose their partials."""
    if desc.contraction is not None:  # checks its three tensors' ranks itself
        return products.reverse(desc.contraction, desc.inputs, desc.outputs, desc.names,
                                   (*args, *outputs))
    out_names = desc.names[len(desc.inputs):]
    flat_out = _flat(desc.outputs, outputs, out_names, "outputs")
    flat_in = _flat(desc.inputs, args, desc.names, "inputs")  # ranks checked
    n = len(desc.inputs)
    every = [*flat_in, *((i + n, ls, t, nm) for i, ls, t, nm in flat_out)]
    if desc.reverse_merge is None:
        lm = _letter_map(desc, flat_out, None, every, reverse=True)
    else:
        lm = _letter_map(desc, every, desc.reverse_merge, reverse=True)
    rep, unread = desc.replicated_dims, desc.policy.unread
    kept = _reverse_kept(desc, outputs)
    ins = _rebuild(desc.inputs, args, lambda i, ls, t: t.attr if i in unread else _attr(
        t, ls, lm, kept if i in desc.linear else (), i, rep))
    outs = _rebuild(desc.outputs, outputs, lambda i, ls, t: _attr(t, ls, lm, kept, i + n, rep))
    return SpmdInfo(ins, outs)


def _reverse_kept(desc: Description, outputs: Sequence[Arg]) -> PartialItems:
    """The outputs' pending results that stay pending in reverse (``policy.reverse_linear``)."""
    if not desc.policy.reverse_linear:
        return ()
    types = desc.policy.linear_types
    return tuple(sorted({p for o in outputs if isinstance(o, TensorSpec)
                         for p in o.attr.partial_items if p[1] in types}))


def _each(ls: Letters) -> str:
    if ls is None:
        return ""
    return ls if isinstance(ls, str) else "".join(ls)
