#!/usr/bin/env bash
# The sweeps behind docs/testbed.md: the repeatability check (the same sweep
# twice) and the paper scenarios plotted there. Root; ~35 min on 2 cores.
#   scripts/scenarios/run-doc-sweeps.sh [OUTDIR]   (default scripts/scenarios/results)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-scripts/scenarios/results}
mkdir -p "$out"
make -s build/tamebpf-delayline
for i in 1 2; do
  scripts/sweep --scenario scripts/scenarios/repeat-check.toml --out "$out/repeat-check-$i.json"
done
for s in paper-s1 paper-s3; do
  scripts/sweep --scenario "scripts/scenarios/$s.toml" --out "$out/$s.json"
done
