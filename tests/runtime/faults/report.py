"""Print the table of fault cases from the JSON lines test_faults.py wrote (FAULTS_REPORT)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
print("| case | ranks | outcome on each rank | time to end (s) | segments seen / removed / left |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    groups: dict[str, list[str]] = {}
    for rank, what in r["outcome"].items():
        groups.setdefault(what, []).append(rank)
    outcome = "; ".join(f"{','.join(ranks)}: {what}" for what, ranks in groups.items())
    print(f"| {r['case']} | {r['n']} | {outcome} | {r['seconds']} | "
          f"{r['segments_seen']} / {r['segments_removed']} / {r['segments_left']} |")
