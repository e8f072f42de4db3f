"""Sliding windows as Paddle's convolution and pooling attributes give them.

``paddings`` has one entry per spatial dim (both sides) or two (before, after, per dim);
``padding_algorithm`` SAME pads so that ``out = ceil(in / stride)`` (dilation 1), VALID pads
nothing. The geometry is one :class:`~spmdrules.runtime.windows.Window` per spatial dim (its
``padding`` is the before side; the after side only changes the output length), so rules, shape
inference, kernels and the lowering's halos share the runtime's window code. ``block_halos`` and
``needed_span`` give the input range each output block reads, through a window or an
interpolation's :class:`~spmdrules.engine.resampling.Resampling`: what a spatially sharded block
must borrow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.resampling import Resampling
from spmdrules.runtime.windows import Window

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Geometry:
    """The windows of a convolution or pooling along its spatial dims, and the output lengths."""

    windows: tuple[Window, ...]
    in_lengths: Shape
    out_lengths: Shape
    pads_after: Shape


def _ints(v: Any, n: int, name: str, op: str) -> Shape:
    vals = (int(v),) * n if isinstance(v, int) else tuple(int(e) for e in v)
    if len(vals) == 1 and n > 1:
        vals = vals * n
    if len(vals) != n:
        raise RuleArgumentError(f"{op}: {name} {list(vals)} has {len(vals)} entries; give {n}")
    return vals


def pads(op: str, paddings: Sequence[int], nsp: int) -> tuple[Shape, Shape]:
    """(before, after) per spatial dim from Paddle's ``paddings``."""
    p = tuple(int(e) for e in paddings)
    if len(p) in (0, 1):
        p = (p[0] if p else 0,) * nsp
    if len(p) == nsp:
        before, after = p, p
    elif len(p) == 2 * nsp:
        before, after = p[0::2], p[1::2]
    else:
        raise RuleArgumentError(
            f"{op}: paddings {list(p)} has {len(p)} entries; give {nsp} (both sides) or "
            f"{2 * nsp} (before and after per spatial dim)"
        )
    if min(before + after, default=0) < 0:
        raise RuleArgumentError(f"{op}: paddings {list(p)} has a negative entry; paddings are >= 0")
    return before, after


def geometry(op: str, in_lengths: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any],
             *, ceil_mode: bool = False) -> Geometry:
    """The forward windows of a convolution (or pooling) over ``in_lengths``."""
    nsp = len(in_lengths)
    strides = _ints(attrs.get("strides", 1), nsp, "strides", op)
    dil = _ints(attrs.get("dilations", 1), nsp, "dilations", op)
    algo = str(attrs.get("padding_algorithm", "EXPLICIT"))
    if algo == "EXPLICIT":
        before, after = pads(op, attrs.get("paddings", ()), nsp)
    elif algo == "VALID":
        before = after = (0,) * nsp
    elif algo == "SAME":
        dil = (1,) * nsp
        b, a = [], []
        for n, k, s in zip(in_lengths, kernel, strides, strict=True):
            total = max((-(-n // s) - 1) * s + k - n, 0)
            b.append(total // 2)
            a.append(total - total // 2)
        before, after = tuple(b), tuple(a)
    else:
        raise RuleArgumentError(
            f"{op}: padding_algorithm {algo!r} is not one of 'EXPLICIT', 'SAME', 'VALID'"
        )
    if min(strides) < 1 or min(dil) < 1 or min(kernel, default=1) < 1:
        raise RuleArgumentError(
            f"{op}: strides {list(strides)}, dilations {list(dil)} and kernel {list(kernel)} "
            "must be >= 1"
        )
    wins, outs = [], []
    for n, k, s, d, pb, pa in zip(in_lengths, kernel, strides, dil, before, after, strict=True):
        w = Window(k, s, pb, d, ceil_mode)
        span = n + pb + pa - w.extent
        if span < 0:
            raise RuleArgumentError(
                f"{op}: a spatial dim of length {n} with paddings ({pb}, {pa}) is shorter than "
                f"the window (kernel {k}, dilation {d}); pad more or use a smaller window"
            )
        m = span // s + 1
        if ceil_mode:
            m = -(-span // s) + 1
            if (m - 1) * s >= n + pb:
                m -= 1
        wins.append(w)
        outs.append(m)
    return Geometry(tuple(wins), tuple(int(n) for n in in_lengths), tuple(outs), after)


def transpose_lengths(op: str, in_lengths: Sequence[int], kernel: Sequence[int],
                      attrs: Mapping[str, Any]) -> Geometry:
    """conv2d_transpose: the geometry of the convolution whose input is the transpose's output."""
    nsp = len(in_lengths)
    if str(attrs.get("padding_algorithm", "EXPLICIT")) == "SAME":
        raise RuleArgumentError(f"{op}: padding_algorithm 'SAME' is not supported; give paddings")
    strides = _ints(attrs.get("strides", 1), nsp, "strides", op)
    dil = _ints(attrs.get("dilations", 1), nsp, "dilations", op)
    if str(attrs.get("padding_algorithm", "EXPLICIT")) == "VALID":
        before = after = (0,) * nsp
    else:
        before, after = pads(op, attrs.get("paddings", ()), nsp)
    size = tuple(attrs.get("output_size", ()) or ())
    opad = tuple(attrs.get("output_padding", ()) or ())
    outs = []
    for i, (n, k, s, d) in enumerate(zip(in_lengths, kernel, strides, dil, strict=True)):
        base = (n - 1) * s - before[i] - after[i] + d * (k - 1) + 1
        if size:
            want = int(_ints(size, nsp, "output_size", op)[i])
            if not base <= want < base + s:
                raise RuleArgumentError(
                    f"{op}: output_size {list(size)} dim {i} is {want}; it must be in "
                    f"[{base}, {base + s - 1}] for this input, stride and padding"
                )
            base = want
        elif opad:
            extra = int(_ints(opad, nsp, "output_padding", op)[i])
            if not 0 <= extra < max(s, d):
                raise RuleArgumentError(
                    f"{op}: output_padding {list(opad)} dim {i} is {extra}; it must be >= 0 and "
                    "smaller than the stride or the dilation"
                )
            base += extra
        if base < 1:
            raise RuleArgumentError(f"{op}: the output's spatial dim {i} would have length {base}")
        outs.append(base)
    g = geometry(op, tuple(outs), kernel, {**attrs, "padding_algorithm": "EXPLICIT",
                                            "paddings": [v for ba in zip(before, after, strict=True)
                                                         for v in ba]})
    if g.out_lengths != tuple(in_lengths):
        raise RuleArgumentError(f"{op}: the output {outs} does not convolve back to {list(in_lengths)}")
    return g




def channels_last(attrs: Mapping[str, Any]) -> bool:
    return str(attrs.get("data_format", "NCHW")) in ("NHWC", "NDHWC")


def channel_axis(data_format: str, rank: int) -> int:
    """Where the channels are: 1 in NC... layouts, the last dim in N...C ones (NLC, NHWC)."""
    return rank - 1 if data_format.upper().endswith("C") and rank > 2 else 1


def collapsed(mesh_shape: Sequence[int], mapping: Sequence[Sequence[int]], spatial: Sequence[int],
              out_lengths: Sequence[int]) -> tuple[int, ...]:
    """The spatial dims (positions in ``spatial``) whose output is shorter than the pieces that
    ``mapping`` cuts them in: there the split ends at the window op, which reads that dim whole.
    Its output would leave a process an empty block (a 2-row input on 2 processes pooled to 1
    row), and balanced output blocks that short can read past the neighbouring input block (4
    rows on 4 processes pooled 2/2: output row 1 reads input rows 2 and 3)."""
    out = []
    for i, d in enumerate(spatial):
        pieces = 1
        for m in mapping[d]:
            pieces *= int(mesh_shape[m])
        if pieces > 1 and out_lengths[i] < pieces:
            out.append(i)
    return tuple(out)


def needed_span(w: Window | Resampling, n: int, out: range, *, transposed: bool = False
                ) -> tuple[int, int]:
    """Input positions in ``[0, n)`` that outputs ``out`` read (``(0, 0)`` for none). ``w`` is
    a sliding window or a resampling (an interpolation's source positions).

    ``transposed``: the op is the transpose of the windows' op (conv2d_transpose), so its input
    positions are the ``n`` windows and its outputs the positions they span; an output block is
    the sum of every window that reaches into it."""
    if not len(out):
        return (0, 0)
    span = (out.start, out.stop)
    if transposed:
        assert isinstance(w, Window), "only a window op has a transpose"
        return w.readers(span, n)
    return w.input_span(span, n)


def block_halos(op: str, tensor: str, dim: int, n: int, out_n: int, w: Window | Resampling,
                parts: int, *, transposed: bool = False) -> list[tuple[int, int]]:
    """Per block of a dim of length ``n`` cut in ``parts`` balanced blocks (its output, of length
    ``out_n``, cut the same way): how many positions the block borrows from its left and right
    neighbours so that its windows see all they read. One-sided where the window is (a stride
    that skips, padding at an edge): a side that needs nothing borrows 0. ``transposed``: the
    op is the windows' transpose (:func:`needed_span`), its input the ``n`` windows.

    Raises a RuleArgumentError where a block's windows reach past its neighbouring block."""
    from spmdrules.core.shards import balanced_range

    ins = [balanced_range(n, parts, j) for j in range(parts)]
    out: list[tuple[int, int]] = []
    for j in range(parts):
        o = range(*balanced_range(out_n, parts, j))
        lo, hi = needed_span(w, n, o, transposed=transposed)
        a, b = ins[j]
        if hi <= lo:
            out.append((0, 0))
            continue
        left, right = max(0, a - lo), max(0, hi - b)
        if (left and (j == 0 or lo < ins[j - 1][0])) or (
                right and (j == parts - 1 or hi > ins[j + 1][1])):
            raise RuleArgumentError(
                f"{op}: {tensor!r} dim {dim} (length {n}) cut in {parts} blocks: output block {j}"
                f" reads input {lo}..{hi - 1} but holds {a}..{b - 1} and its neighbours hold "
                f"{ins[j - 1][0] if j else a}..{(ins[j + 1][1] if j + 1 < parts else b) - 1}; a "
                "window spans more than the neighbouring block: shard this dim over fewer "
                "processes or replicate it"
            )
        out.append((left, right))
    return out


@dataclass(frozen=True, slots=True)
class Windowed:
    """The spatial letters of a window op (pooling, an interpolation) as a description's policy
    (``Policy.windows``): each letter's input and output lengths and its windows, so that the
    engine ends a split whose output is shorter than its pieces (``collapsed``) and refuses one
    whose windows reach past the neighbouring block (``block_halos``); the lowering exchanges
    the halos. ``refusal``: the geometry's error for this call's attributes, raised only where a
    spatial letter is split (unsplit, the attributes never matter to the layout)."""

    op: str
    tensor: str
    letters: str
    dims: tuple[int, ...]
    in_lengths: Shape
    out_lengths: Shape
    windows: tuple[Window | Resampling, ...] = ()
    refusal: str = ""
    transposed: bool = False

    def read(self, lm: Mapping[str, tuple[int, ...]], mesh_shape: Sequence[int]
             ) -> dict[str, tuple[int, ...]]:
        """``lm`` with the letters whose split ends here whole; raises where a window would
        reach past the neighbouring block."""
        mapping = [lm.get(ch, ()) for ch in self.letters]
        if not any(mapping):
            return dict(lm)
        if self.refusal:
            raise RuleArgumentError(self.refusal)
        ends = collapsed(mesh_shape, mapping, range(len(mapping)), self.out_lengths)
        for i, dims in enumerate(mapping):
            if dims and i not in ends:
                parts = 1
                for d in dims:
                    parts *= int(mesh_shape[d])
                block_halos(self.op, self.tensor, self.dims[i], self.in_lengths[i],
                            self.out_lengths[i], self.windows[i], parts,
                            transposed=self.transposed)
        gone = {self.letters[i] for i in ends}
        return {ch: (() if ch in gone else dims) for ch, dims in lm.items()}
