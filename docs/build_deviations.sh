#!/usr/bin/env bash
# Regenerate docs/deviations.md: the prose around it is kept in deviations.head.md / .tail.md.
set -euo pipefail
cd "$(dirname "$0")"
{ cat deviations.head.md; python -m spmdrules.conformance --deviations; cat deviations.tail.md; } > deviations.md
