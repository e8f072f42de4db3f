"""Cases of the convolutions: random kernels, strides, paddings (one or two per dim, SAME,
VALID), dilations, groups and layouts; spatial sharding on or off. A probe gives a contracted
letter size 1, split in every tensor that holds it: the input channels (the forward's
contraction), a kernel dim, the output channels or the batch (the gradients')."""

from __future__ import annotations

from typing import Any

from spmdrules.verify.cases.case import Draft, Rng, Split, pick, register_cases, size_one_probe


def _window(rng: Rng, n: int, nsp: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """kernel, strides, paddings (2 per dim), dilations that fit an input of n per dim."""
    k, s, p, d = [], [], [], []
    for _ in range(nsp):
        ki = int(rng.integers(1, 4))
        di = int(rng.integers(1, 3)) if ki > 1 else 1
        pb, pa = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        while n + pb + pa < di * (ki - 1) + 1:
            pa += 1
        k.append(ki)
        s.append(int(rng.integers(1, 4)))
        p += [pb, pa]
        d.append(di)
    return k, s, p, d


@register_cases
def conv(op: str, rng: Rng) -> Draft:
    base = op.removesuffix("_grad")
    nsp = 3 if base == "conv3d" else 2
    last = rng.random() < 0.3
    n = int(pick(rng, (1, 2, 3, 4)))
    sp = [int(pick(rng, (3, 4, 5, 6, 7))) for _ in range(nsp)]
    k, s, p, d = _window(rng, min(sp), nsp)
    groups, c, m = _channels(rng, base)
    letter = str(pick(rng, "ccmnu")) if size_one_probe(rng) else ""
    if letter in ("c", "m"):  # one channel: one group
        groups, c, m = _one_channel(letter, base, groups, c, m)
    n = 1 if letter == "n" else n
    if letter == "u":
        k[0], d[0] = 1, 1
    attrs: dict[str, Any] = {
        "strides": s, "dilations": d, "groups": groups,
        "data_format": ("NDHWC" if nsp == 3 else "NHWC") if last else
        ("NCDHW" if nsp == 3 else "NCHW"),
        "spatial_sharding": bool(rng.random() < 0.4),
    }
    algo = pick(rng, ("EXPLICIT", "EXPLICIT", "EXPLICIT", "SAME", "VALID"))
    if base == "conv2d_transpose":
        algo = "EXPLICIT" if algo == "SAME" else algo
        p = _transpose_paddings(p, k, d)
        f = (c, m // groups, *k)
        if rng.random() < 0.3:
            attrs["output_padding"] = _output_padding(rng, s, d)
    else:
        f = (m, c // groups, *k)
    attrs["padding_algorithm"] = algo
    attrs["paddings"] = p if rng.random() < 0.6 else p[0::2]
    x = (n, *sp, c) if last else (n, c, *sp)
    return Draft(base, (x, f), ("real", "real"), attrs,
                 _probe(letter, last, nsp, base == "conv2d_transpose"))


def _transpose_paddings(p: list[int], k: list[int], d: list[int]) -> list[int]:
    """Paddings a transposed conv takes: at most half the dilated window on each side."""
    k2, d2 = [x for x in k for _ in (0, 1)], [x for x in d for _ in (0, 1)]
    return [min(v, (ki - 1) * di // 2) for v, ki, di in zip(p, k2, d2, strict=True)]


def _output_padding(rng: Rng, s: list[int], d: list[int]) -> list[int]:
    """An output padding per spatial dim, below its stride or dilation."""
    return [int(rng.integers(0, max(si, di))) for si, di in zip(s, d, strict=True)]


def _channels(rng: Rng, base: str) -> tuple[int, int, int]:
    """Groups, input channels and output channels; a depthwise conv has one input channel per
    group."""
    if base == "depthwise_conv2d":
        groups = int(pick(rng, (1, 2, 3, 4)))
        return groups, groups, groups * int(pick(rng, (1, 2)))
    groups = int(pick(rng, (1, 1, 1, 2)))
    return groups, groups * int(pick(rng, (1, 2, 3))), groups * int(pick(rng, (1, 2, 3)))


def _one_channel(letter: str, base: str, groups: int, c: int, m: int) -> tuple[int, int, int]:
    """The probed channel letter (input ``c`` or output ``m``) of size one, in one group."""
    if base == "depthwise_conv2d":
        m, c = (m // groups, 1) if letter == "c" else (1, 1)
    else:
        c, m = (1, m) if letter == "c" else (c, 1)
    return 1, c, m


def _probe(letter: str, last: bool, nsp: int, transpose: bool) -> tuple[Split, ...]:
    """The dims of input (0), filter (1) and output (2) that hold the probed letter."""
    channel = nsp + 1 if last else 1
    dims = {"c": ((0, channel), (1, 0 if transpose else 1)),
            "m": ((1, 1 if transpose else 0), (2, channel)),
            "n": ((0, 0), (2, 0)), "u": ((1, 2),)}.get(letter, ())
    return tuple(Split(a, d) for a, d in dims)
