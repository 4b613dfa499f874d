#!/usr/bin/env bash
# One command: install what is missing, build, open the GUI on FILE (or on the bundled example).
# The example is a synthetic dump (documented as such) written by `poolscope synth`: a GPT-like model
# (1.3B parameters, fp32) with AdamW on a 20 GiB device: it survives forward and backward and runs out of
# memory in its first optimizer step, where Adam's moment buffers are created. The wall is optimizer
# state, and cutting the micro-batch would not have helped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/scripts/deps.sh"
"$here/scripts/build.sh" --target poolscope
bin="$here/build/app/poolscope"
file="${1:-}"
if [ -z "$file" ]; then
  file="$here/resources/examples/example_oom.pickle.zst"
  if [ ! -f "$file" ]; then
    file="$here/build/example_oom.pickle.zst"
    [ -f "$file" ] || "$bin" synth --layers 24 --hidden 2048 --heads 16 --seq 1024 --batch 2 --optimizer adamw \
      --steps 2 --capacity 20GiB -o "$file"
  fi
fi
exec "$bin" "$file" "${@:2}"
