#!/usr/bin/env bash
# The measurements behind docs/testbed.md. Root; on 2 cores about 15 min per
# paper scenario at 58 ms (20 at 118 ms), 9 min per repeatability sweep,
# 4 min for accuracy.
#   scripts/scenarios/run-doc-sweeps.sh [OUTDIR [STEP...]]
# STEP: repeat (the same sweep twice, then compared), accuracy, or a scenario
# name (paper-s1, paper-s3, ...). Default: repeat accuracy paper-s1 paper-s3.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-scripts/scenarios/results}
shift || true
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(repeat accuracy paper-s1 paper-s3)
py=.venv/bin/python
export PYTHONPATH=$PWD/userspace  # tamebpf_eval.plot_sweep of this checkout
mkdir -p "$out"
make -s build/tamebpf-delayline
for step in "${steps[@]}"; do
  case $step in
  repeat)
    for i in 1 2; do
      scripts/sweep --scenario scripts/scenarios/repeat-check.toml --out "$out/repeat-check-$i.json"
    done
    $py -m tamebpf_testbed.compare "$out/repeat-check-1.json" "$out/repeat-check-2.json" \
      | tee "$out/repeat-check-compare.md"
    $py -m tamebpf_eval.plot_sweep "$out/repeat-check-1.json" "$out/repeat-check-2.json" \
      --title "repeatability: 100 Mbit/s, 50 ms, 50 packets, CUBIC" \
      --out docs/img/testbed-repeat-check.png
    ;;
  accuracy)
    $py -m tamebpf_testbed.accuracy --out "$out/accuracy.json"
    $py -m tamebpf_testbed.accuracy --rtts 2,10,20,58,118,200 --out "$out/accuracy-rtt.json"
    ;;
  *)
    scripts/sweep --scenario "scripts/scenarios/$step.toml" --out "$out/$step.json"
    $py -m tamebpf_eval.plot_sweep "$out/$step.json" --out "docs/img/testbed-$step.png"
    ;;
  esac
done
