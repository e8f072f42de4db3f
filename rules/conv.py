"""Convolutions: conv2d, conv3d, depthwise_conv2d, conv2d_transpose (and the gradient rules).

Each call is one Einsum description built from the layout (``data_format``), the rank and
``groups``, plus a policy of whole letters (see docs/rules.md "Convolution and pooling"):

* conv: ``input nc<S>, filter mc<K> -> output nm<S>`` (channels last: ``n<S>c``, ``n<S>m``); the
  input channel ``c`` is contracted, so a ``c`` sharded like the filter's leaves a pending sum;
* conv2d_transpose: the filter is ``cm<K>`` (input channels first);
* ``<S>`` are the spatial letters (``hw`` or ``dhw``), ``<K>`` the kernel's (``uv``/``tuv``).

The policy: the kernel letters are whole (a kernel cut into pieces computes windows of another
size); the spatial letters are whole too, unless the call opts into spatial sharding with
``spatial_sharding=True``, which keeps a sharded H/W/D on the output and leaves the halo to the
lowering (docs/rules.md); with ``groups > 1`` the input channels are whole (a channel block does
not hold whole groups) and conv2d_transpose's output channels too. Paddle's channel checks are
kept: the input's channel dim must be sharded as the filter's (depthwise: the filter's second dim
never is).

Paddle 3.3.1's rules differ in six ways that execution proves wrong; each is a named quirk that
``answer(..., quirks=...)`` reproduces, for the conformance layer to recognise Paddle's answers
(spmdrules/conformance/deviations/conv.py, docs/deviations/conv.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.description import Description
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, shard_product
from spmdrules.engine.windows import (
    Geometry,
    block_halos,
    collapsed,
    geometry,
    transpose_lengths,
)

CONV_OPS: Final = ("conv2d", "conv3d", "depthwise_conv2d", "conv2d_transpose")

#: Paddle's quirks, each reproducible (see the module doc and docs/deviations/conv.md)
SPATIAL_KEPT: Final = "spatial-kept"  # a sharded H/W/D stays sharded without a halo
KERNEL_SHARDED: Final = "kernel-sharded"  # kernel dims merge into H/W (or are contracted)
CHANNELS_FIRST_OUT: Final = "channels-first-output"  # an NHWC output read as NCHW
GROUPED_CHANNEL: Final = "grouped-channel"  # with groups > 1 a channel block is a group block
GRAD_MERGES: Final = "grad-three-merges"  # gradient attrs from three separate merges
REVERSE_PARTIAL: Final = "reverse-keeps-partial"  # reverse hands back the output's pending sums
QUIRKS: Final = (KERNEL_SHARDED, SPATIAL_KEPT, CHANNELS_FIRST_OUT, GROUPED_CHANNEL, GRAD_MERGES,
                 REVERSE_PARTIAL)

_FORMATS: Final = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


@dataclass(frozen=True, slots=True)
class ConvCall:
    """What the rule reads of a call: the op, its spatial rank, layout and groups."""

    op: str
    nsp: int
    channels_last: bool
    groups: int
    spatial: bool


def _call(op: str, x: TensorSpec, f: TensorSpec, data_format: str, groups: int,
          spatial: bool) -> ConvCall:
    nsp = 3 if op.startswith("conv3d") else 2
    for name, t in (("input", x), ("filter", f)):
        if t.ndim != nsp + 2:
            raise RuleArgumentError(
                f"{op}: {name!r} has rank {t.ndim} but must have rank {nsp + 2} "
                f"({' or '.join(_FORMATS[nsp])}); pass a {nsp}-D convolution's tensors"
            )
    if data_format not in _FORMATS[nsp]:
        raise RuleArgumentError(
            f"{op}: data_format {data_format!r} is not one of {list(_FORMATS[nsp])}"
        )
    if groups < 1:
        raise RuleArgumentError(f"{op}: groups must be >= 1, got {groups}")
    last = data_format.endswith("C")
    return ConvCall(op, nsp, last, groups, spatial)


def description(call: ConvCall, quirks: frozenset[str] = frozenset()) -> Description:
    """The call's letters and whole letters (Paddle's, with ``quirks``)."""
    base = call.op.removesuffix("_grad")
    sp = "hw" if call.nsp == 2 else "dhw"
    kern = "uv" if call.nsp == 2 else "tuv"
    if KERNEL_SHARDED in quirks:
        kern = sp  # Paddle names the filter's spatial dims as the input's
    # Paddle's depthwise gradient lets the one-channel dims claim mesh dims (a shared '1')
    c = "1" if base == "depthwise_conv2d" and GRAD_MERGES in quirks else "c"
    last = call.channels_last
    x = f"n{sp}{c}" if last else f"n{c}{sp}"
    out_last = last and CHANNELS_FIRST_OUT not in quirks
    out = f"n{sp}m" if out_last else f"nm{sp}"
    f = f"{c}m{kern}" if base == "conv2d_transpose" else f"m{c}{kern}"
    whole = set()
    if KERNEL_SHARDED not in quirks:
        whole |= set(kern)
    # the gradient rules take no halo: their spatial dims stay whole
    if (not call.spatial or call.op.endswith("_grad")) and SPATIAL_KEPT not in quirks:
        whole |= set(sp)
    if base == "depthwise_conv2d":
        whole.add("c")  # Paddle's too: the depthwise input channel is never sharded
    elif call.groups > 1 and GROUPED_CHANNEL not in quirks:
        whole.add("c")
        if base == "conv2d_transpose":
            whole.add("m")
    return Description((x, f), (out,), whole=frozenset(whole))


def _channel_check(call: ConvCall, x: TensorSpec, f: TensorSpec, quirks: frozenset[str]) -> None:
    base = call.op.removesuffix("_grad")
    xm, fm = x.attr.multi_dims_mapping, f.attr.multi_dims_mapping
    if base == "depthwise_conv2d":
        # a gradient replicates a split size-1 dim (nothing to split), as Paddle's answers;
        # Paddle's forward refuses it, and so does ours
        if fm[1] and (f.shape[1] > 1 or not call.op.endswith("_grad")):
            raise RuleArgumentError(
                f"{call.op}: 'filter' dim 1 (one input channel per group) is sharded on mesh dims "
                f"{list(fm[1])}; it is never sharded, replicate it"
            )
        return
    xc = call.nsp + 1 if call.channels_last else 1
    fc = 0 if base == "conv2d_transpose" else 1
    if xm[xc] != fm[fc]:
        raise RuleArgumentError(
            f"{call.op}: the input channel dim {xc} of 'input' is sharded on {list(xm[xc])} but "
            f"dim {fc} of 'filter' on {list(fm[fc])}; shard both the same way (a pending sum "
            "over the channels) or replicate both"
        )


def _blank(ls: str, m: MultiDims, whole: frozenset[str]) -> MultiDims:
    return tuple(() if ch in whole else d for ch, d in zip(ls, m, strict=True))


def _merge(pairs: Iterable[tuple[str, TensorSpec]], whole: frozenset[str],
           names: Sequence[str]) -> einsum.LetterMap:
    lm = einsum.merge(((ls, _blank(ls, t.attr.multi_dims_mapping, whole)) for ls, t in pairs),
                      names=names)
    return einsum.resolve_mesh_conflicts(lm)


def _read(t: TensorSpec, ls: str, lm: einsum.LetterMap, partial: PartialItems = ()) -> DistAttr:
    return attr(t, einsum.mapping_for(ls, lm), partial)


def _contracted(operands: Iterable[tuple[str, DistAttr]], out: str) -> PartialItems:
    """The pending sum of the product of ``operands`` (as laid out) over the letters ``out`` lacks."""
    return einsum.contracted_partial(((ls, a.multi_dims_mapping) for ls, a in operands), out)


def _letters(d: Description) -> tuple[str, str, str]:
    x, f = d.inputs
    (out,) = d.outputs
    assert isinstance(x, str) and isinstance(f, str) and isinstance(out, str)
    return x, f, out


# ---- the answers ----------------------------------------------------------------------------------
def _spatial(call: ConvCall) -> list[int]:
    return list(range(1, call.nsp + 1)) if call.channels_last else list(range(2, call.nsp + 2))


def check_halos(call: ConvCall, x: TensorSpec, f: TensorSpec, xm: MultiDims,
                attrs: dict[str, Any] | None) -> None:
    """Spatial sharding: every block's windows must stay within its neighbouring blocks (for a
    transpose: every output block's windows, which are its input positions)."""
    sp = _spatial(call)
    if attrs is None or not any(xm[d] for d in sp):
        return
    transposed = call.op == "conv2d_transpose"
    g, outs = _windows(call.op, [x.shape[d] for d in sp], f.shape[2:], attrs)
    for i, d in enumerate(sp):
        if xm[d]:
            block_halos(call.op, "input", d, x.shape[d], outs[i], g.windows[i],
                        shard_product(x.attr.mesh.shape, xm[d]), transposed=transposed)


def _windows(op: str, lengths: list[int], kernel: Sequence[int], attrs: dict[str, Any]
             ) -> tuple[Geometry, Sequence[int]]:
    """The windows of ``op`` over an input of spatial ``lengths``, and its output's lengths: a
    transposed conv's output is its windows' input (``transpose_lengths``), never shorter than
    its own input."""
    if op == "conv2d_transpose":
        g = transpose_lengths(op, lengths, kernel, attrs)
        return g, g.in_lengths
    g = geometry(op, lengths, kernel, attrs)
    return g, g.out_lengths


def ended(call: ConvCall, d: Description, t: TensorSpec,
          lengths: Callable[[list[int]], Sequence[int]] | None) -> frozenset[str]:
    """The spatial letters whose split ends at this op (``windows.collapsed``): those of ``t``
    (the input, or the output in reverse) whose output length (``lengths`` of the spatial dims,
    else ``t``'s own) is shorter than the pieces that split them. The op reads them whole; the
    other splits stay (the batch's among them)."""
    sp = _spatial(call)
    letters = d.inputs[0]
    assert isinstance(letters, str)
    m = t.attr.multi_dims_mapping
    if not call.spatial or not any(m[i] for i in sp) or {letters[i] for i in sp} <= d.whole:
        return frozenset()
    outs = [t.shape[i] for i in sp] if lengths is None else lengths(sp)
    return frozenset(letters[sp[i]] for i in collapsed(t.attr.mesh.shape, m, sp, outs))


def forward_answer(op: str, x: TensorSpec, f: TensorSpec, data_format: str, groups: int,
                   spatial: bool, quirks: frozenset[str] = frozenset(),
                   attrs: dict[str, Any] | None = None) -> SpmdInfo:
    call = _call(op, x, f, data_format, groups, spatial)
    _channel_check(call, x, f, quirks)
    d = description(call, quirks)
    xl, fl, ol = _letters(d)
    whole = d.whole
    if not quirks and attrs is not None:
        whole |= ended(call, d, x, lambda sp: _windows(op, [x.shape[i] for i in sp],
                                                       f.shape[2:], attrs)[1])
    # depthwise: the input channel is never sharded (Paddle blanks it before the merge too)
    lm = _merge(((xl, x), (fl, f)), whole | {"1"}, ("input", "filter"))
    xa, fa = _read(x, xl, lm), _read(f, fl, lm)
    partial = _contracted(((xl, xa), (fl, fa)), ol)
    mesh = x.attr.mesh
    if call.spatial and not quirks:
        check_halos(call, x, f, xa.multi_dims_mapping, attrs)
    out = DistAttr._make(mesh, einsum.mapping_for(ol, lm), partial)
    return SpmdInfo((xa, fa), (out,))


def reverse_answer(op: str, x: TensorSpec, f: TensorSpec, out: TensorSpec, data_format: str,
                   groups: int, spatial: bool, quirks: frozenset[str] = frozenset(),
                   attrs: dict[str, Any] | None = None) -> SpmdInfo:
    call = _call(op, x, f, data_format, groups, spatial)
    if out.ndim != call.nsp + 2:
        raise RuleArgumentError(
            f"{op}: 'output' has rank {out.ndim} but must have rank {call.nsp + 2}"
        )
    d = description(call, quirks)
    xl, fl, ol = _letters(d)
    whole = d.whole if quirks else d.whole | ended(call, d, out, None)
    lm = _merge(((ol, out),), whole, ("output",))
    if call.spatial and not quirks:
        check_halos(call, x, f, einsum.mapping_for(xl, lm), attrs)
    # The inputs read off the output never shard the contracted channels, so the output they
    # produce is complete: its pending sums are resharded away (Paddle keeps them).
    keep = out.attr.partial_items if REVERSE_PARTIAL in quirks else ()
    o = attr(out, _blank(ol, out.attr.multi_dims_mapping, whole), keep)
    return SpmdInfo((_read(x, xl, lm), _read(f, fl, lm)), (o,))


def grad_answer(op: str, x: TensorSpec, f: TensorSpec, g: TensorSpec, data_format: str,
                groups: int, spatial: bool, quirks: frozenset[str] = frozenset()) -> SpmdInfo:
    """``<conv>_grad(input, filter, output_grad) -> input_grad, filter_grad``.

    One merge of the three tensors lays out all of them; each gradient is a contraction of the
    other two, so it is pending over the mesh dims of the letters it lacks (``m`` for the input's,
    ``n`` and a sharded spatial letter for the filter's). ``output_grad``'s own pending sums are
    resharded away. With ``GRAD_MERGES`` it is Paddle's three merges instead.
    """
    call = _call(op, x, f, data_format, groups, spatial)
    if g.ndim != call.nsp + 2:
        raise RuleArgumentError(
            f"{op}: 'output_grad' has rank {g.ndim} but must have rank {call.nsp + 2}"
        )
    d = description(call, quirks)
    xl, fl, ol = _letters(d)
    if GRAD_MERGES not in quirks:
        _channel_check(call, x, f, quirks)
        lm = _merge(((xl, x), (fl, f), (ol, g)), d.whole, ("input", "filter", "output_grad"))
        mesh = x.attr.mesh
        xa, fa, ga = _read(x, xl, lm), _read(f, fl, lm), _read(g, ol, lm)
        # input_grad contracts filter and output_grad, filter_grad input and output_grad
        return SpmdInfo(
            (xa, fa, ga),
            (DistAttr._make(mesh, xa.multi_dims_mapping, _contracted(((fl, fa), (ol, ga)), xl)),
             DistAttr._make(mesh, fa.multi_dims_mapping, _contracted(((xl, xa), (ol, ga)), fl))),
        )
    return _paddle_grad(call, d, x, f, g)


def _paddle_grad(call: ConvCall, d: Description, x: TensorSpec, f: TensorSpec, g: TensorSpec
                 ) -> SpmdInfo:
    xl, fl, ol = _letters(d)
    base = call.op.removesuffix("_grad")
    w = d.whole
    mesh = x.attr.mesh
    m1 = _merge(((fl, f), (ol, g)), w, ("filter", "output_grad"))
    m2 = _merge(((xl, x), (ol, g)), w, ("input", "output_grad"))
    m3 = _merge(((xl, x), (fl, f), (ol, g)), w, ("input", "filter", "output_grad"))
    depthwise = base == "depthwise_conv2d"
    # each gradient's pending sum from its own merge's operands (Paddle's three merges)
    xg_part = () if depthwise else _contracted(((fl, _read(f, fl, m1)), (ol, _read(g, ol, m1))), xl)
    fg_part = () if depthwise else _contracted(((xl, _read(x, xl, m2)), (ol, _read(g, ol, m2))), fl)
    xg_map = list(einsum.mapping_for(xl, m1))
    fg_map = list(einsum.mapping_for(fl, m2))
    g_part: PartialItems = ()
    if not depthwise and g.attr.partial_items:
        pdims = g.attr.partial_dims
        if len(pdims) != 1:
            raise RuleArgumentError(
                f"{call.op}: 'output_grad' is pending over mesh dims {sorted(pdims)}; Paddle "
                "takes a pending sum over one mesh dim only (the channels')"
            )
        p = next(iter(pdims))
        xc = xl.index("c")
        fc = fl.index("c")
        if (x.attr.multi_dims_mapping[xc] == (p,) and f.attr.multi_dims_mapping[fc] == (p,)):
            xg_map[xc] = (p,)
            fg_map[fc] = (p,)
            g_part = ((p, "sum"),)
    return SpmdInfo(
        (_read(x, xl, m2), _read(f, fl, m1), _read(g, ol, m3, g_part)),
        (DistAttr._make(mesh, tuple(xg_map), xg_part), DistAttr._make(mesh, tuple(fg_map), fg_part)),
    )


# ---- registration ---------------------------------------------------------------------------------
_CONV_ATTRS: Final = {
    # Paddle's attributes in each rule's call order
    "conv2d": ("strides", "paddings", "padding_algorithm", "dilations", "groups", "data_format"),
    "conv3d": ("strides", "paddings", "padding_algorithm", "groups", "dilations", "data_format"),
    "depthwise_conv2d": ("strides", "paddings", "padding_algorithm", "groups", "dilations",
                         "data_format"),
    "conv2d_transpose": ("strides", "paddings", "output_padding", "output_size",
                         "padding_algorithm", "groups", "dilations", "data_format"),
}


def _attr_params(op: str) -> list[A]:  # type: ignore[valid-type]
    nsp = 3 if op == "conv3d" else 2
    defaults = {
        "strides": A("strides", "ints", (1,) * nsp), "paddings": A("paddings", "ints", (0,) * nsp),
        "padding_algorithm": A("padding_algorithm", "str", "EXPLICIT"),
        "dilations": A("dilations", "ints", (1,) * nsp), "groups": A("groups", "int", 1),
        "data_format": A("data_format", "str", _FORMATS[nsp][0]),
        "output_padding": A("output_padding", "ints", ()),
        "output_size": A("output_size", "ints", ()),
    }
    return [defaults[a] for a in _CONV_ATTRS[op]] + [A("spatial_sharding", "bool", False)]


def _register(op: str) -> None:
    names = _CONV_ATTRS[op]
    i_groups, i_fmt = names.index("groups"), names.index("data_format")

    keys = (*names, "spatial_sharding")

    def fwd(x: TensorSpec, f: TensorSpec, *attrs: Any) -> SpmdInfo:
        return forward_answer(op, x, f, str(attrs[i_fmt]), int(attrs[i_groups]),
                              bool(attrs[-1]), attrs=dict(zip(keys, attrs, strict=True)))

    def rev(x: TensorSpec, f: TensorSpec, out: TensorSpec, *attrs: Any) -> SpmdInfo:
        return reverse_answer(op, x, f, out, str(attrs[i_fmt]), int(attrs[i_groups]),
                              bool(attrs[-1]), attrs=dict(zip(keys, attrs, strict=True)))

    def grad(x: TensorSpec, f: TensorSpec, g: TensorSpec, *attrs: Any) -> SpmdInfo:
        return grad_answer(op + "_grad", x, f, g, str(attrs[i_fmt]), int(attrs[i_groups]),
                           bool(attrs[-1]))

    params = _attr_params(op)
    register_rule(
        op, forward=fwd, reverse=rev, inputs=[T("input"), T("filter")], outputs=[T("output")],
        attrs=params,
        doc=f"{op}: batch and output channels keep their shards, input channels give a pending "
        "sum; spatial dims replicated unless spatial_sharding (then a halo in the lowering).",
    )
    if op != "conv2d":
        register_rule(
            op + "_grad", forward=grad, inputs=[T("input"), T("filter"), T("output_grad")],
            outputs=[T("input_grad"), T("filter_grad")], attrs=params,
            doc=f"{op}'s gradient: one merge of input, filter and output_grad; each gradient is "
            "pending over the letters it lacks.",
        )


for _op in CONV_OPS:
    _register(_op)
