#!/usr/bin/env bash
# Regenerate docs/deviations.md: the prose around its two tables is kept in deviations.head.md,
# .proofs.md and .tail.md.
set -euo pipefail
cd "$(dirname "$0")"
{
  cat deviations.head.md
  python -m spmdrules.conformance --deviations
  cat deviations.proofs.md
  python -m spmdrules.conformance --deviations --execute
  cat deviations.tail.md
} > deviations.md
