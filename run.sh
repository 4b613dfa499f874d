#!/usr/bin/env bash
# One command: install what is missing, build, open the GUI on FILE (or on the bundled example).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/scripts/deps.sh"
"$here/scripts/build.sh" --target poolscope
file="${1:-$here/resources/examples/example_oom.pickle.zst}"
exec "$here/build/app/poolscope" "$file" "${@:2}"
