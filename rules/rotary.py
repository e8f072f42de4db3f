"""fused_rotary_position_embedding: rotary position embedding of q, k and v, ``abcd -> abcd``.

q, k and v are ``abcd`` ([batch, seq, heads, head_dim]; with ``time_major`` [seq, batch, ...],
the letters still follow the dims); position_ids are [batch, seq] (``ab``, or ``ba`` when time
major); sin and cos are [1, seq, 1, head_dim] (or [seq, head_dim]), broadcast over batch and
heads (their size-1 dims are ``1``: never split).

Policy, as Paddle's FusedRopeInferSpmd / FusedRopeInferSpmdReverse:

* q, k, v and position_ids merge (forward) or out_q, out_k, out_v (reverse), every dim taking
  part; the head dim then is whole (a rotation pairs entries across it: ``claimed``);
* the sequence may stay split only when sin and cos are given and position_ids are not: each
  rank then rotates its positions with its own block of sin and cos, which follow q's sequence.
  Position ids may point anywhere in sin and cos, so with them the sequence is whole.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, ShapeArg
from spmdrules.engine.registry import A, Opt, T

Shape = tuple[int, ...]


def _present(s: ShapeArg) -> bool:
    return isinstance(s, tuple) and s not in ((), (0,))


def _letters(s: ShapeArg, ls: str) -> str | None:
    """The letters of an optional tensor: None when absent, '' for the rank-0 stand-in."""
    if s is None:
        return None
    return "" if s == () else ls


def check_rope(q: ShapeArg, k: ShapeArg, v: ShapeArg, sin: ShapeArg, cos: ShapeArg,
               position_ids: ShapeArg, time_major: bool) -> Shape:
    qs = _check_qkv(q, k, v)
    batch, seq = (qs[1], qs[0]) if time_major else (qs[0], qs[1])
    _check_tables(qs, seq, sin, cos, _present(position_ids))
    if _present(position_ids) and position_ids != (batch, seq):
        raise RuleArgumentError(
            f"'position_ids' has shape {list(position_ids)} but must be [batch, seq_len] = "  # type: ignore[arg-type]
            f"{[batch, seq]}"
        )
    if qs[3] % 2:
        raise RuleArgumentError(
            f"'q' has head_dim {qs[3]}; rotary embedding rotates pairs, so it must be even"
        )
    return qs


def _check_qkv(q: ShapeArg, k: ShapeArg, v: ShapeArg) -> Shape:
    """q's shape: 4-D, and k's and v's where present."""
    if not isinstance(q, tuple) or len(q) != 4:
        raise RuleArgumentError(
            f"'q' must be 4-D [batch, seq_len, num_heads, head_dim] ([seq_len, batch, ...] when "
            f"time_major), got shape {list(q) if isinstance(q, tuple) else q}"
        )
    qs: Shape = q  # type: ignore[assignment]
    for name, t in (("k", k), ("v", v)):
        if _present(t) and t != qs:
            raise RuleArgumentError(
                f"{name!r} has shape {list(t)} but 'q' has {list(qs)}; "  # type: ignore[arg-type]
                "rotary embedding rotates tensors of one shape"
            )
    return qs


def _check_tables(qs: Shape, seq: int, sin: ShapeArg, cos: ShapeArg, ids: bool) -> None:
    """sin and cos: both or neither, one shape, covering q's sequence (at least, with ids)."""
    if _present(sin) != _present(cos) or (_present(sin) and sin != cos):
        raise RuleArgumentError(
            f"'sin' and 'cos' must have one shape, got {sin} and {cos}; pass both or neither"
        )
    if not _present(sin):
        return
    ss: Shape = sin  # type: ignore[assignment]
    if len(ss) not in (2, 4) or (len(ss) == 4 and (ss[0] != 1 or ss[2] != 1)):
        raise RuleArgumentError(
            f"'sin' and 'cos' must be [1, seq_len, 1, head_dim] or [seq_len, head_dim], got "
            f"{list(ss)}"
        )
    s_seq, s_dim = ss[-3] if len(ss) == 4 else ss[0], ss[-1]
    if s_dim != qs[3] or (s_seq < seq if ids else s_seq != seq):
        raise RuleArgumentError(
            f"'sin' and 'cos' have seq_len {s_seq} and head_dim {s_dim}, but q needs head_dim "
            f"{qs[3]} and seq_len {'at least ' if ids else ''}{seq}"
        )


def describe_rope(q: ShapeArg, k: ShapeArg, v: ShapeArg, sin: ShapeArg, cos: ShapeArg,
                  position_ids: ShapeArg, *, time_major: bool) -> Description:
    check_rope(q, k, v, sin, cos, position_ids, time_major)
    seq = "a" if time_major else "b"
    table = ("1" + seq + "1d") if isinstance(sin, tuple) and len(sin) == 4 else seq + "d"
    # the sequence may stay split only with sin and cos and without position ids
    split_seq = _present(sin) and _present(cos) and not _present(position_ids)
    return Description(
        ("abcd", _letters(k, "abcd"), _letters(v, "abcd"), _letters(sin, table),
         _letters(cos, table), _letters(position_ids, "ba" if time_major else "ab")),
        # an absent k or v has a rank-0 stand-in output
        ("abcd", "abcd" if _present(k) else "", "abcd" if _present(v) else ""),
        merge=(0, 1, 2, 5),
        claimed=frozenset("d" if split_seq else "d" + seq),
    )


ROPE_ATTRS = [A("use_neox_rotary_style", "bool", True), A("time_major", "bool", False),
              A("rotary_emb_base", "float", 10000.0)]

register_described(
    "fused_rotary_position_embedding", describe_rope,
    inputs=[T("q"), Opt("k"), Opt("v"), Opt("sin"), Opt("cos"), Opt("position_ids")],
    outputs=[T("out_q"), Opt("out_k"), Opt("out_v")],
    attrs=ROPE_ATTRS,
    doc="FusedRopeInferSpmd / FusedRopeInferSpmdReverse: batch and heads split; the sequence "
    "split only with sin and cos and no position ids; the head dim whole.",
)
