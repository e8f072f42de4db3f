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
  ``'1'`` dims on different mesh dims conflict); by default a ``'1'`` dim takes no part.

An op registers a ``describe`` function from the call's shapes and attributes to its Description
(``register_described``); forward inference merges the inputs' letters and reads every tensor off
them, reverse inference merges the outputs' letters and reads the inputs off them. A family is
then its notation plus its policy, never two hand-written directions::

    register_described(
        "cumsum", lambda x, *, axis, **_: Description.of(..., whole=letter(axis)), ...)
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import contraction as products
from spmdrules.engine import einsum
from spmdrules.engine.contraction import Contraction, OperandReading
from spmdrules.engine.einsum import ALPHABET, AxisConflict, LetterMap
from spmdrules.engine.plan import Plan, compile_plan
from spmdrules.engine.registry import AttrParam, Rule, TensorParam, register_rule

#: one tensor argument's letters: a string, None for an absent optional, a tuple for a list
Letters = str | None | tuple[str, ...]
#: one tensor argument as a rule receives it
Arg = TensorSpec | None | tuple[TensorSpec, ...]
#: one tensor argument's global shape, in the same structure
ShapeArg = tuple[int, ...] | None | tuple[tuple[int, ...], ...]

DESCRIBE_CACHE: Final = 4096


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
    every: Sequence[tuple[int, str, TensorSpec, str]] = (),
) -> LetterMap:
    # in the order ``merge`` gives them: the first to claim a mesh dim keeps it
    chosen = list(flat) if sources is None else [f for i in sources for f in flat if f[0] == i]
    sizes_of = _grouped_sizes(desc.grouped, every or flat, desc.replicated_dims) \
        if desc.grouped else None
    whole = desc.whole
    if desc.grouped and _guard_uneven(desc.grouped_guard, every or flat):
        whole = whole | desc.grouped
    lm = einsum.merge(_operands(desc, chosen, whole), on_axis_conflict=desc.on_axis_conflict,
                      names=[nm for *_, nm in chosen])
    lm = einsum.resolve_mesh_conflicts(lm, desc.priority)
    if sizes_of:
        lm = _ungrouped(lm, sizes_of, chosen[0][2].attr.mesh.shape if chosen else ())
    if desc.claimed:
        lm = {ch: dims for ch, dims in lm.items() if ch not in desc.claimed}
    if desc.divisible:
        sizes = einsum.letter_sizes((ls, t.shape) for _, ls, t, _ in flat)
        lm = einsum.drop_indivisible(lm, sizes, flat[0][2].attr.mesh.shape if flat else ())
    return lm


def _operands(desc: Description, chosen: Sequence[tuple[int, str, TensorSpec, str]],
              whole: frozenset[str]) -> list[tuple[str, MultiDims]]:
    """The merged tensors' letters and mappings, as the op reads them."""
    operands = [(ls, _blank(ls, t.attr.multi_dims_mapping, whole, desc.claim_broadcast))
                for _, ls, t, _ in chosen]
    if desc.reading is not None:
        operands = desc.reading.read(operands, _each(desc.outputs[0]) if desc.outputs else "")
    return operands


def _grouped_sizes(grouped: frozenset[str], tensors: Sequence[tuple[int, str, TensorSpec, str]],
                   broadcast: frozenset[tuple[int, int]]) -> dict[str, set[int]]:
    """Every size each grouped letter has over the tensors, but a ``broadcast`` dim's (a mask's
    size-1 heads, never split: it pairs with every block of heads)."""
    sizes: dict[str, set[int]] = {ch: set() for ch in grouped}
    for i, ls, t, _ in tensors:
        for p, (ch, n) in enumerate(zip(ls, t.shape, strict=True)):
            if ch in sizes and (i, p) not in broadcast:
                sizes[ch].add(n)
    return sizes


def _guard_uneven(guard: tuple[int, int] | None,
                  tensors: Sequence[tuple[int, str, TensorSpec, str]]) -> bool:
    """Is the guard tensor's dim split by a count its size does not divide?"""
    if guard is None:
        return False
    arg, dim = guard
    for i, _, t, _ in tensors:
        if i == arg:
            count = 1
            for d in t.attr.multi_dims_mapping[dim]:
                count *= t.attr.mesh.shape[d]
            return t.shape[dim] % count != 0
    return False


def _ungrouped(lm: LetterMap, sizes_of: dict[str, set[int]], mesh_shape: tuple[int, ...]
               ) -> LetterMap:
    """The letters without a grouped letter whose merged mesh dims do not divide every size it
    has (a block of q's heads must meet the k head its group shares): it is whole."""
    out = dict(lm)
    for ch, sizes in sizes_of.items():
        dims = out.get(ch, ())
        count = 1
        for d in dims:
            count *= mesh_shape[d]
        if dims and any(n % count for n in sizes):
            out[ch] = ()
    return out


def _attr(t: TensorSpec, ls: str, lm: LetterMap, partial: PartialItems = (),
          i: int = -1, replicated: frozenset[tuple[int, int]] = frozenset()) -> DistAttr:
    m = einsum.mapping_for(ls, lm)
    if replicated:
        m = tuple(() if (i, p) in replicated else dims for p, dims in enumerate(m))
    a = t.attr
    if a._mdm == m and a._partial == partial:
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
        raise RuleArgumentError("the op needs at least one tensor argument")
    lm = _letter_map(desc, flat, desc.merge)
    partial: dict[int, str] = {}
    masked: tuple[int, ...] = ()
    if lm:
        kept = "".join(_each(ls) for ls in desc.outputs)
        contracted = [ch for ch, dims in lm.items() if dims and ch not in kept and ch != "1"]
        if contracted and desc.pending is None:
            lm = {ch: (() if ch in contracted else dims) for ch, dims in lm.items()}
        elif contracted:
            for ch in contracted:
                for d in lm[ch]:
                    partial[d] = desc.pending  # type: ignore[assignment]
            if desc.mask is not None and desc.pending == "sum":
                # a letter split over several mesh dims leaves plain sums: a slice is then
                # zero along each of them but on one process of the group, not on one process
                masked = tuple(sorted(lm[ch][0] for ch in contracted if len(lm[ch]) == 1))
    linear_partial = _linear_partials(desc.linear, args, lm, partial) if desc.linear else {}
    out_partial: PartialItems = tuple(sorted(partial.items())) if partial else ()
    rep = desc.replicated_dims
    ins = _rebuild(desc.inputs, args,
                   lambda i, ls, t: _attr(t, ls, lm, linear_partial.get(i, ()), i, rep))
    return SpmdInfo(ins, _out_attrs(desc, flat[0][2].attr.mesh, lm, out_partial, masked))


def _linear_partials(linear: tuple[int, ...], args: Sequence[Arg], lm: LetterMap,
                     partial: dict[int, str]) -> dict[int, PartialItems]:
    """The pending sums each ``linear`` input keeps (on mesh dims no letter holds), which the
    outputs take too (added to ``partial``)."""
    out: dict[int, PartialItems] = {}
    used = {d for dims in lm.values() for d in dims}
    for i in linear:
        a = args[i]
        if isinstance(a, TensorSpec):
            items = tuple(p for p in a.attr.partial_items if p[1] == "sum" and p[0] not in used)
            out[i] = items
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
        lm = _letter_map(desc, flat_out, None, every)
    else:
        lm = _letter_map(desc, every, desc.reverse_merge)
    rep = desc.replicated_dims
    ins = _rebuild(desc.inputs, args, lambda i, ls, t: _attr(t, ls, lm, (), i, rep))
    outs = _rebuild(desc.outputs, outputs, lambda i, ls, t: _attr(t, ls, lm, (), i + n, rep))
    return SpmdInfo(ins, outs)


def _each(ls: Letters) -> str:
    if ls is None:
        return ""
    return ls if isinstance(ls, str) else "".join(ls)


# ---- registering an op by its description -------------------------------------------------------
Describe = Callable[..., Description]


class Switches:
    """``fast = False`` makes every described rule describe each call afresh and answer by the
    general inference: the definition the remembered descriptions and the plans must equal
    (``tests/engine/test_description_plans.py`` compares the two on Paddle's recorded cases)."""

    fast: bool = True


def _arg_ranks(args: Sequence[Arg]) -> Hashable:
    """``ranks`` of the arguments' shapes."""
    return tuple([None if a is None else len(a.shape) if type(a) is TensorSpec
                  else tuple([len(t.shape) for t in a]) for a in args])  # type: ignore[union-attr]


def ranks(shapes: tuple[ShapeArg, ...]) -> Hashable:
    """A description key: the tensors' ranks (None for an absent one, a tuple for a list)."""
    return tuple(None if s is None else len(s) if not s or type(s[0]) is int
                 else tuple(map(len, s)) for s in shapes)  # type: ignore[arg-type]


def _shape_of(a: Arg) -> ShapeArg:
    if a is None:
        return None
    if isinstance(a, TensorSpec):
        return a.shape
    return tuple(t.shape for t in a)


def register_described(
    name: str,
    describe: Describe,
    *,
    inputs: Sequence[TensorParam],
    outputs: Sequence[TensorParam],
    attrs: Sequence[AttrParam] = (),
    aliases: Sequence[str] = (),
    reverse: bool = True,
    family: str | None = None,
    doc: str = "",
    op_attrs: Sequence[AttrParam] = (),
    key: Callable[[tuple[ShapeArg, ...]], Hashable] | None = None,
    check: Callable[..., None] | None = None,
    masks: bool = False,
) -> Rule:
    """Register ``name`` with forward (and reverse) inference derived from ``describe``.

    ``describe(*shapes, **attrs)`` receives each tensor argument's global shape (None when absent,
    a tuple of shapes for a list) and the attributes by name, and returns the Description of the
    call; it raises a RuleArgumentError for a call the op cannot take. ``op_attrs`` are the
    op's attributes beyond the rule's (see ``register_rule``); ``describe`` does not see them.

    Descriptions are remembered per call's shapes and attributes. ``key`` declares that the
    description (and every error ``describe`` raises) depends on the shapes only through
    ``key(shapes)``, ``ranks`` for most ops: a call with new sizes of known ranks then reuses the
    description. ``python -m spmdrules.verify`` draws many sizes per rank, so a key that forgets
    something the description needs shows as a wrong case. ``check(*shapes, *attrs)`` (the
    attribute values in the rule's order) runs on every call before the remembered description is
    used: the errors that depend on more than the key (a slice's range against its dim's size)
    belong there.
    """
    n = len(inputs)
    attr_names = tuple(a.name for a in attrs)
    names = tuple(p.name for p in (*inputs, *outputs))
    sig = inspect.signature(describe)
    takes_all = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    wanted = attr_names if takes_all else tuple(a for a in attr_names if a in sig.parameters)

    cache: dict[Hashable, tuple[Description, Plan]] = {}

    def described(args: Sequence[Arg], values: tuple[Any, ...]) -> tuple[Description, Plan]:
        if check is not None:
            check(*map(_shape_of, args), *values)
        k: Hashable = None
        if not Switches.fast:
            pass
        elif key is ranks:  # read off the specs: no shapes tuple to build on the common call
            k = (_arg_ranks(args), values)
        else:
            shapes = tuple(map(_shape_of, args))
            k = (shapes if key is None else key(shapes), values)
        try:
            if k is not None:
                return cache[k]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute value (a list): describe every time
            k = None
        shapes = tuple(map(_shape_of, args))
        kw = {a: v for a, v in zip(attr_names, values, strict=True) if a in wanted}
        d = describe(*shapes, **kw)
        d = dataclasses.replace(d, names=names)
        entry = (d, compile_plan(d))
        if k is not None:
            if len(cache) >= DESCRIBE_CACHE:
                cache.clear()
            cache[k] = entry
        return entry

    def forward(*call: Any) -> SpmdInfo:
        args = call[:n]
        desc, plan = described(args, call[n:])
        return (Switches.fast and plan.forward(args)) or infer_forward(desc, args)

    def backward(*call: Any) -> SpmdInfo:
        args, outs = call[:n], call[n : n + len(outputs)]
        desc, plan = described(args, call[n + len(outputs):])
        return (Switches.fast and plan.reverse(args, outs)) or infer_reverse(desc, args, outs)

    # the op's entry points lead to its description, which lives in the family's module
    forward.__wrapped__ = backward.__wrapped__ = describe  # type: ignore[attr-defined]
    if family is None:
        family = sys._getframe(1).f_globals.get("__name__", "").rsplit(".", 1)[-1]
    return register_rule(
        name, forward=forward, reverse=backward if reverse else None, inputs=inputs,
        outputs=outputs, attrs=attrs, aliases=aliases, family=family, doc=doc, op_attrs=op_attrs,
        masks=masks,
    )
