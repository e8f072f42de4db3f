"""Load case records, call the engine exactly as the public contract says, compare with Paddle."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spmdrules.conformance.calls import agrees, call_engine
from spmdrules.conformance.deviation import classify, deviations
from spmdrules.core.errors import SpmdError
from spmdrules.core.spec import SpmdInfo

Verdict = Literal["agree", "disagree", "crash"]


class _Tensor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    shape: list[int]
    dims_mapping: list[int]
    partial: dict[str, str] = Field(default_factory=dict)
    absent: Literal["shape0", "rank0"] | None = None


class _Mesh(BaseModel):
    shape: list[int]
    process_ids: list[int]


class _Case(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: str
    direction: Literal["forward", "reverse"]
    rule: str
    reverse_kind: Literal["reverse", "grad"] | None = None
    mesh: _Mesh
    inputs: list[_Tensor | list[_Tensor]]
    outputs: list[_Tensor | list[_Tensor]] = Field(default_factory=list)
    attrs: dict[str, Any] = Field(default_factory=dict)
    expected: dict[str, Any]
    case_id: str


def default_case_paths() -> list[Path]:
    """The case files shipped inside the package (a compressed copy of Paddle's records)."""
    return sorted((Path(__file__).parent / "data").glob("*.jsonl.gz"))


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(q for q in p.iterdir() if q.name.endswith((".jsonl", ".jsonl.gz")))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"no case file or folder at {p}")
    return files


def iter_cases(
    paths: Iterable[str | Path], ops: Sequence[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield validated case records from .jsonl / .jsonl.gz files or folders of them."""
    wanted = set(ops) if ops else None
    for f in _expand(paths):
        if wanted is not None:
            stem = f.name.split(".jsonl")[0]
            if stem not in wanted:
                continue
        opener = gzip.open if f.name.endswith(".gz") else open
        with opener(f, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    _Case.model_validate(rec)
                except (json.JSONDecodeError, ValidationError) as e:
                    raise ValueError(f"{f}:{lineno}: not a valid case record: {e}") from None
                if wanted is None or rec["op"] in wanted:
                    yield rec


@dataclass(slots=True)
class CaseResult:
    case_id: str
    op: str
    verdict: Verdict
    deviation: str | None = None
    detail: str = ""
    #: our answer, or the error our rule raised (None for a crash)
    answer: SpmdInfo | BaseException | None = field(default=None, repr=False, compare=False)


def run_case(case: dict[str, Any]) -> CaseResult:
    got: SpmdInfo | BaseException
    try:
        got = call_engine(case)
    except SpmdError as e:
        got = e
    except Exception as e:  # a crash: anything that is not a typed SpmdError
        return CaseResult(case["case_id"], case["op"], "crash", None, f"{type(e).__name__}: {e}")
    if agrees(case, got):
        return CaseResult(case["case_id"], case["op"], "agree", answer=got)
    detail = f"{type(got).__name__}: {got}" if isinstance(got, BaseException) else repr(got)
    return CaseResult(case["case_id"], case["op"], "disagree", classify(case, got), detail, got)


@dataclass(slots=True)
class OpTally:
    cases: int = 0
    agree: int = 0
    disagree: int = 0
    crash: int = 0
    deviations: dict[str, int] = field(default_factory=dict)

    @property
    def unexplained(self) -> int:
        return self.disagree - sum(self.deviations.values())

    def add(self, r: CaseResult) -> None:
        self.cases += 1
        if r.verdict == "agree":
            self.agree += 1
        elif r.verdict == "crash":
            self.crash += 1
        else:
            self.disagree += 1
            if r.deviation is not None:
                self.deviations[r.deviation] = self.deviations.get(r.deviation, 0) + 1


def run_cases(cases: Iterable[dict[str, Any]]) -> tuple[dict[str, OpTally], list[CaseResult]]:
    """Tally per op; return the tallies and every non-agreeing result."""
    tallies: dict[str, OpTally] = {}
    misses: list[CaseResult] = []
    for case in cases:
        r = run_case(case)
        tallies.setdefault(r.op, OpTally()).add(r)
        if r.verdict != "agree":
            misses.append(r)
    return tallies, misses


@dataclass(frozen=True, slots=True)
class DeviationRow:
    name: str
    kind: str
    ops: tuple[str, ...]
    count: int
    example: str


def deviation_summary(misses: Iterable[CaseResult]) -> list[DeviationRow]:
    """Per deviation class: the ops it touches, its case count and its first case."""
    ops: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for m in misses:
        if m.deviation is None:
            continue
        ops.setdefault(m.deviation, set()).add(m.op)
        counts[m.deviation] = counts.get(m.deviation, 0) + 1
        first.setdefault(m.deviation, m.case_id)
    kinds = {d.name: d.kind for d in deviations()}
    return [
        DeviationRow(name, kinds[name], tuple(sorted(ops[name])), counts[name], first[name])
        for name in sorted(counts)
    ]


def deviation_table(rows: Sequence[DeviationRow]) -> str:
    """The markdown summary table of docs/deviations.md."""
    lines = ["| class | kind | ops | cases | example case |", "|---|---|---|---|---|"]
    lines += [f"| `{r.name}` | {r.kind} | {', '.join(r.ops)} | {r.count} | `{r.example}` |"
              for r in rows]
    return "\n".join(lines)
