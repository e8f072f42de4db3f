"""flash_attention: scaled dot-product attention, ``abcd,aecd,aecf,acbe -> abcf,acbe,acb,s``.

Letters (Paddle's): ``a`` batch, ``b`` query positions, ``c`` heads, ``d`` head dim, ``e`` key
positions, ``f`` value head dim. q is ``abcd``, k ``aecd``, v ``aecf``, the optional mask
``acbe``; the outputs are out ``abcf``, softmax ``acbe``, softmax_lse ``acb`` and the seed offset
(two integers, never sharded). Every position attends over all keys and every score needs the
whole head dim, so ``b``, ``d``, ``e`` and ``f`` are whole: only batch and heads are split.

Policy, as Paddle's FlashAttInferSpmd / FlashAttInferSpmdReverse:

* forward merges q, k and the mask; v takes k's layout (Paddle reads k's mapping in v's place);
* reverse merges v (Paddle reads it in out's place) and softmax_lse;
* grouped-query attention (q has ``g`` times k's heads): a head shard keeps q's groups beside
  their k and v head only when its mesh dims divide both head counts (``grouped``), and, as
  Paddle, no head is split when k is given with its heads split unevenly (``grouped_guard``);
  a mask's size-1 heads dim broadcasts and does not count;
* a mask's size-1 heads dim merges but is never split (nor a size-1 batch dim that broadcasts).

The seed offset tensors are not laid out by the rule: fixed_seed_offset keeps what it is given,
and the seed_offset output is replicated.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, ShapeArg
from spmdrules.engine.registry import A, Opt, T

Shape = tuple[int, ...]


def _four(name: str, s: ShapeArg, dims: str) -> Shape:
    if not isinstance(s, tuple) or len(s) != 4 or not all(isinstance(n, int) for n in s):
        raise RuleArgumentError(
            f"{name!r} must be 4-D [{dims}], got shape {list(s) if isinstance(s, tuple) else s}"
        )
    return s  # type: ignore[return-value]


def check_qkv(q: ShapeArg, k: ShapeArg, v: ShapeArg) -> tuple[Shape, Shape, Shape]:
    """q, k and v as the op needs them: equal batch, k and v one key length, q's heads a
    multiple of k's and v's, q and k one head dim."""
    qs = _four("q", q, "batch, seq_len_q, num_heads, head_dim")
    ks = _four("k", k, "batch, seq_len_kv, num_heads_kv, head_dim")
    vs = _four("v", v, "batch, seq_len_kv, num_heads_kv, head_dim_v")
    for name, s in (("k", ks), ("v", vs)):
        if s[0] != qs[0]:
            raise RuleArgumentError(
                f"{name!r} has batch size {s[0]} but 'q' has {qs[0]}; give them one batch"
            )
        if s[2] == 0 or qs[2] % s[2]:
            raise RuleArgumentError(
                f"'q' has {qs[2]} heads, not a multiple of {name!r}'s {s[2]} (grouped-query "
                f"attention shares each {name} head among q's heads); give {name!r} a divisor "
                f"of {qs[2]} heads"
            )
    if ks[3] != qs[3]:
        raise RuleArgumentError(
            f"'k' has head dim {ks[3]} but 'q' has {qs[3]}; the scores contract them"
        )
    if ks[1] != vs[1]:
        raise RuleArgumentError(
            f"'k' has {ks[1]} key positions but 'v' has {vs[1]}; give them one seq_len_kv"
        )
    return qs, ks, vs


def check_mask(mask: ShapeArg, qs: Shape, ks: Shape) -> Shape | None:
    """The mask's shape: [batch or 1, heads or 1, seq_len_q, seq_len_kv]."""
    if mask is None or mask == ():
        return None
    ms = _four("attn_mask", mask, "batch or 1, num_heads or 1, seq_len_q, seq_len_kv")
    want = (qs[0], qs[2], qs[1], ks[1])
    for i, (n, w) in enumerate(zip(ms, want, strict=True)):
        if n != w and not (i < 2 and n == 1):
            raise RuleArgumentError(
                f"'attn_mask' dim {i} has size {n} but must be {w}"
                f"{' or 1 (broadcast)' if i < 2 else ''}; the mask is [batch, heads, seq_len_q, "
                "seq_len_kv]"
            )
    return ms


def _seed_letters(s: ShapeArg) -> str | None:
    # letters no other tensor has: never merged, always whole
    if s is None or not isinstance(s, tuple) or s == (0,):
        return None
    return "uvw"[: len(s)] if len(s) <= 3 else None


def _grouped(qs: Shape, ks: Shape, vs: Shape) -> frozenset[str]:
    return frozenset("c") if qs[2] != ks[2] or qs[2] != vs[2] else frozenset()


def describe_flash_attention(
    q: ShapeArg, k: ShapeArg, v: ShapeArg, fixed_seed_offset: ShapeArg, attn_mask: ShapeArg,
) -> Description:
    qs, ks, vs = check_qkv(q, k, v)
    ms = check_mask(attn_mask, qs, ks)
    # a rank-0 mask stands for "absent" (the conformance README's rank0 convention)
    mask = ("" if attn_mask == () else None) if ms is None else "acbe"
    return Description(
        ("abcd", "aecd", "aecf", _seed_letters(fixed_seed_offset), mask),
        ("abcf", "acbe", "acb", "u"),
        whole=frozenset("bdef"),
        pending=None,
        merge=(0, 1) if mask is None else (0, 1, 4),
        grouped=_grouped(qs, ks, vs),
        grouped_guard=(1, 2),
        reverse_merge=(2, 5 + 2),
        # a mask broadcast over heads (or batch) merges its letter but is never split there
        replicated_dims=frozenset() if ms is None else frozenset(
            (4, i) for i in (0, 1) if ms[i] == 1 and (i == 1 or qs[0] > 1)),
    )


FLASH_ATTRS = [
    A("dropout", "float", 0.0), A("causal", "bool", False), A("return_softmax", "bool", False),
    A("is_test", "bool", False),
]

register_described(
    "flash_attention", describe_flash_attention,
    inputs=[T("q"), T("k"), T("v"), Opt("fixed_seed_offset"), Opt("attn_mask")],
    outputs=[T("out"), T("softmax"), T("softmax_lse"), T("seed_offset")],
    attrs=FLASH_ATTRS, op_attrs=[A("rng_name", "str", "")],
    doc="FlashAttInferSpmd / FlashAttInferSpmdReverse: batch and heads split, the sequences and "
    "head dims whole; grouped-query heads split only where the split divides both head counts.",
)
