"""Cases of embedding: ids in range of the table. A probe gives the table one row, split: the
lookup contracts the vocabulary (a rank without the row counts 0)."""

from __future__ import annotations

from spmdrules.verify.cases.case import (
    SIZES,
    Draft,
    Rng,
    Split,
    draw_rank,
    draw_shape,
    pick,
    register_cases,
    size_one_probe,
)


@register_cases
def embedding(op: str, rng: Rng) -> Draft:
    vocab, hidden = int(pick(rng, SIZES[2:])), int(pick(rng, SIZES))
    ids = draw_shape(rng, draw_rank(rng, 0, 2))
    probe = size_one_probe(rng)
    vocab = 1 if probe else vocab
    if op == "c_embedding":
        # the table holds ids start..start+vocab-1 of a larger vocabulary; others read zeros
        start = int(rng.integers(0, 4))
        total = start + vocab + int(rng.integers(0, 4))
        return Draft(op, ((vocab, hidden), ids), ("real", f"index:{total}"),
                     {"start_index": start, "vocab_size": total}, (Split(0, 0),) if probe else ())
    pad = int(rng.integers(vocab)) if rng.random() < 0.2 else -1
    return Draft(op, (ids, (vocab, hidden)), (f"index:{vocab}", "real"),
                 {"padding_idx": pad, "sparse": rng.random() < 0.2},
                 (Split(1, 0),) if probe else ())
