#!/usr/bin/env bash
# Every face's output on every corpus file, into one folder, so that a refactor that must not change
# behaviour can be checked with `diff -r before/ after/`:
#   tests/tools/golden_outputs.sh BINARY OUTDIR [CORPUS_DIR]
# Per file: report (text and JSON, at peak, end and OOM where there is one), explain of the three
# largest allocations at the peak (text and JSON), whatif (JSON) for a few scenarios, and the review
# image (PNG). Exit codes are kept beside the outputs (a refused file is an output too).
set -uo pipefail
bin="$1"
out="$2"
corpus="${3:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared/corpus}"
mkdir -p "$out"
export QT_QPA_PLATFORM=offscreen
for f in "$corpus"/*; do
  name=$(basename "$f")
  case "$name" in expected.json | README.md) continue ;; esac
  d="$out/$name"
  mkdir -p "$d"
  run() { # run NAME ARGS...: stdout, stderr and the exit code of one invocation
    local what="$1"
    shift
    "$bin" "$@" >"$d/$what.out" 2>"$d/$what.err"
    echo $? >"$d/$what.rc"
  }
  run report report "$f"
  for at in peak end oom; do
    run "report-$at.json" report "$f" --json --at "$at"
  done
  run report-nopools.json report "$f" --json --no-pools
  # The three largest allocations alive at the peak, explained.
  python3 - "$d/report-peak.json.out" >"$d/addresses" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
for dev in r.get("devices", []):
    for row in (dev.get("moment") or {}).get("top", [])[:3]:
        print(dev["device"], row["address"], (dev.get("moment") or {}).get("index", -1))
EOF
  n=0
  while read -r dev addr index; do
    n=$((n + 1))
    run "explain-$n" explain "$f" --device "$dev" --addr "$addr" --index "$index"
    run "explain-$n.json" explain "$f" --device "$dev" --addr "$addr" --index "$index" --json
  done <"$d/addresses"
  run whatif-identity.json whatif "$f" --json
  run whatif-checkpoint.json whatif "$f" --json --checkpoint
  run whatif-sgd.json whatif "$f" --json --optimizer sgd
  run whatif-zero3.json whatif "$f" --json --zero 3 --ranks 8
  run whatif-batch.json whatif "$f" --json --batch-scale 0.5
  # The sequence and the precision read each allocation's size law (x b*s against x b*s^2, x s...).
  run whatif-seq.json whatif "$f" --json --seq-scale 2
  run whatif-autocast.json whatif "$f" --json --autocast bf16
  run render render "$f" -o "$d/review.png"
  sed -i "s|$d/||" "$d/render.out" # the output folder is not part of the behaviour
  # The replay's wall-clock time differs run to run: not part of the behaviour.
  for j in "$d"/whatif-*.json.out; do
    sed -i -E 's/"replay_us": [0-9]+/"replay_us": 0/' "$j"
  done
done
