#!/usr/bin/env bash
# The Debian package the way a user meets it:
#   1. `cpack -G DEB` from the build folder (into a scratch folder: the build tree is left as it was);
#   2. its control fields (Depends computed by dpkg-shlibdeps), file list, ownership and permissions;
#   3. unpacked into a scratch root with `dpkg -x`: the installed `poolscope --version`, `synth` and
#      `report` on the fixture it wrote, reading the installed rules; the desktop entry through
#      desktop-file-validate; the MIME XML through xmllint and update-mime-database, and GIO (what GNOME
#      file managers ask) naming a snapshot by its bytes;
#   4. as root only (CI): `apt-get install ./poolscope_*.deb`, the same checks on the system (the dpkg
#      triggers of shared-mime-info, desktop-file-utils and the icon cache ran), then purge, and the
#      machine's package list, MIME database and desktop database are as before.
# Usage: tests/install/test_package.sh [BUILD_DIR]   (default: build/ beside this checkout)
set -euo pipefail
# No `producer | grep -q` below: grep -q exits at its first match and, under pipefail, the producer's
# SIGPIPE would fail the check at random.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/poolscope-package.XXXXXX")"
installed_by_us=0

cleanup() {
  if [ "$installed_by_us" = 1 ]; then
    echo "== package: removing poolscope after a failure"
    apt-get purge -y -qq -o DPkg::Lock::Timeout=300 poolscope >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
step() { echo "== package: $*"; }
fail() { echo "package test FAILED: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || fail "$1 is not installed ($2; scripts/deps.sh installs it)"; }
need cpack cmake
need dpkg-shlibdeps dpkg-dev
need desktop-file-validate desktop-file-utils
need update-mime-database shared-mime-info
need gio libglib2.0-bin
need xmllint libxml2-utils
t0=$SECONDS

# 1. Build the package.
step "cpack -G DEB in $build"
[ -f "$build/CPackConfig.cmake" ] || fail "$build is not a configured build folder (no CPackConfig.cmake)"
if ! (cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/cpack.log" 2>&1); then
  cat "$work/cpack.log" >&2
  fail "cpack failed"
fi
debs=("$work"/pkg/poolscope_*.deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || fail "expected one poolscope_*.deb in $work/pkg"
deb="${debs[0]}"
step "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB) in $((SECONDS - t0)) s"

# 2. Control fields and contents.
field() { dpkg-deb -f "$deb" "$1"; }
version="$(field Version)"
upstream="${version%-*}"
[ "$(field Package)" = poolscope ] || fail "Package is '$(field Package)'"
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] || fail "Architecture is '$(field Architecture)'"
[ "$(field Section)" = devel ] || fail "Section is '$(field Section)'"
[[ "$(field Maintainer)" =~ ^[^\<]+\ \<[^\>]+@[^\>]+\>$ ]] || fail "Maintainer '$(field Maintainer)' is not 'Name <email>'"
desc="$(field Description)"
[ "$(printf '%s\n' "$desc" | wc -l)" -ge 3 ] || fail "Description has no long part: $desc"
depends="$(field Depends)"
# Computed from the binary's libraries: Qt, QCustomPlot, zstd, zlib, the C and C++ runtimes, each
# with a minimum version.
python3 - "$depends" <<'EOF' || fail "Depends is not what dpkg-shlibdeps computes: $depends"
import re, sys
deps = {}
for alt in sys.argv[1].split(","):
    m = re.fullmatch(r"\s*([a-z0-9.+-]+)(?:\s*\((>=\s*[^)]+)\))?\s*", alt)
    assert m, alt
    deps[m.group(1)] = m.group(2)
for lib in ("libc6", "libstdc++6", "libqt6core6", "libqt6gui6", "libqt6widgets6", "libqt6svg6", "libzstd1", "zlib1g"):
    assert deps.get(lib), f"no versioned {lib}"
assert any(d.startswith("libqcustomplot") for d in deps), "no QCustomPlot"
EOF
dpkg-deb -c "$deb" >"$work/contents"
if [ -n "$(awk '$2 != "root/root"' "$work/contents")" ]; then
  awk '$2 != "root/root"' "$work/contents" | head >&2
  fail "files not owned by root/root"
fi
# Folders 0755, files 0644, the one program 0755.
bad_modes="$(awk '{ m=$1; p=$6
  if (m ~ /^d/) { if (m != "drwxr-xr-x") print }
  else if (p == "./usr/bin/poolscope") { if (m != "-rwxr-xr-x") print }
  else if (m != "-rw-r--r--") print }' "$work/contents")"
[ -z "$bad_modes" ] || fail "unexpected modes: $bad_modes"
awk '$1 !~ /^d/ {print substr($6, 2)}' "$work/contents" | sort >"$work/files"
{
  echo /usr/bin/poolscope
  echo /usr/share/applications/poolscope.desktop
  for s in 16 22 24 32 48 64 128 256 512; do echo "/usr/share/icons/hicolor/${s}x${s}/apps/poolscope.png"; done
  echo /usr/share/icons/hicolor/scalable/apps/poolscope.svg
  echo /usr/share/mime/packages/poolscope.xml
  echo /usr/share/poolscope/capture/README.md
  echo /usr/share/poolscope/capture/poolscope_capture.py
  echo /usr/share/poolscope/classifier/rules.json
} | sort >"$work/expected"
diff -u "$work/expected" "$work/files" || fail "the package's files differ from the expected list (above)"
step "control: $version, Depends: $depends"

# 3. Unpacked into a scratch root, run from there.
root="$work/root"
dpkg -x "$deb" "$root"
bin="$root/usr/bin/poolscope"
[ "$("$bin" --version)" = "poolscope $upstream" ] || fail "--version says '$("$bin" --version)', the package is $upstream"
helper="$root/usr/share/poolscope/capture/poolscope_capture.py"
[[ "$("$bin" --help)" == *"$helper"* ]] || fail "--help does not point at the installed capture helper $helper"
python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$helper" || fail "$helper is not Python"
fixture="$work/fixture.pickle.zst"
"$bin" synth --layers 4 --hidden 512 --heads 8 --seq 256 --batch 2 --optimizer adamw --steps 2 --capacity 2GiB \
  -o "$fixture" >/dev/null || fail "poolscope synth failed"
"$bin" report "$fixture" >"$work/report.txt" || fail "poolscope report exited $?"
grep -q "peak" "$work/report.txt" || { cat "$work/report.txt" >&2; fail "report names no peak"; }
"$bin" report "$fixture" --json >"$work/report.json" || fail "poolscope report --json exited $?"
python3 - "$work/report.json" <<'EOF' || fail "report --json is not the expected object"
import json, sys
doc = json.load(open(sys.argv[1]))
devices = doc["devices"]
assert devices and all(d["peak_allocated"] > 0 for d in devices), devices
EOF
# The installed rules are the ones read: spoilt, report must name that file.
rules="$root/usr/share/poolscope/classifier/rules.json"
cp "$rules" "$work/rules.json"
echo '{' >"$rules"
if "$bin" report "$fixture" >/dev/null 2>"$work/err.txt"; then fail "report ignored the installed rules $rules"; fi
grep -qF "$rules" "$work/err.txt" || { cat "$work/err.txt" >&2; fail "the error does not name $rules"; }
cp "$work/rules.json" "$rules"
step "scratch root: --version, synth, report, report --json, installed rules and helper: ok"

out="$(desktop-file-validate "$root/usr/share/applications/poolscope.desktop" 2>&1)" || fail "desktop-file-validate: $out"
[ -z "$out" ] || fail "desktop-file-validate: $out"
python3 - "$root/usr/share/icons/hicolor" <<'EOF' || fail "icons are not PNGs of their sizes"
import glob, os, struct, sys
pngs = glob.glob(os.path.join(sys.argv[1], "*x*", "apps", "poolscope.png"))
assert len(pngs) == 9, pngs
for p in pngs:
    head = open(p, "rb").read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", p
    w, h = struct.unpack(">II", head[16:24])
    size = int(os.path.basename(os.path.dirname(os.path.dirname(p))).split("x")[0])
    assert (w, h) == (size, size), (p, w, h)
EOF
xmllint --noout "$root/usr/share/mime/packages/poolscope.xml" || fail "the MIME XML is not well-formed"
mkdir -p "$work/xdg/mime/packages" "$work/home"
cp "$root/usr/share/mime/packages/poolscope.xml" "$work/xdg/mime/packages/"
out="$(env XDG_DATA_HOME="$work/home" XDG_DATA_DIRS="$work/xdg:/usr/share" \
  update-mime-database "$work/xdg/mime" 2>&1)" || fail "update-mime-database: $out"
[ -z "$out" ] || fail "update-mime-database: $out"
zstd -q -d "$fixture" -o "$work/dump" # a bare name: only the bytes can tell
# content_type FILE [XDG_DATA_DIRS]: the type GIO gives FILE, with no per-user MIME data.
content_type() {
  env XDG_DATA_HOME="$work/home" XDG_DATA_DIRS="${2:-/usr/local/share:/usr/share}" \
    gio info -a standard::content-type "$1" | sed -n 's/^ *standard::content-type: //p'
}
got="$(content_type "$work/dump" "$work/xdg:/usr/share")"
[ "$got" = application/x-pytorch-memory-snapshot ] || fail "GIO calls a snapshot pickle '$got'"
got="$(content_type "$fixture" "$work/xdg:/usr/share")"
[ "$got" = application/x-zstd-compressed-pytorch-memory-snapshot ] || fail "GIO calls $fixture '$got'"
step "desktop entry, icons, MIME type (GIO: by content and by name): ok"

# 4. Installed on this machine with apt, then removed: root only (CI runs as root).
if [ "$(id -u)" != 0 ]; then
  step "not root: apt install/remove skipped (CI runs it as root)"
  step "passed in $((SECONDS - t0)) s"
  exit 0
fi
if [ "$(dpkg-query -W -f='${Status}' poolscope 2>/dev/null)" = "install ok installed" ]; then
  step "poolscope is already installed here: apt install/remove skipped, the machine's install is left alone"
  step "passed in $((SECONDS - t0)) s"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -o DPkg::Lock::Timeout=300 "$@"; }
# Everything the package needs must already be here (the build's -dev packages pull the libraries):
# the install adds poolscope and nothing else, so removing it restores the machine.
plan="$(apt_get install -s "$deb" | sed -n 's/^Inst \([^ ]*\).*/\1/p' | sort | tr '\n' ' ')"
[ "$plan" = "poolscope " ] || fail "apt would install more than poolscope: $plan"
state() {
  dpkg-query -W -f='${Package} ${Version} ${Status}\n' | sort
  ls /usr/share/mime/application
  grep -c . /usr/share/applications/mimeinfo.cache 2>/dev/null || true
}
state >"$work/before"
installed_by_us=1
apt_get install -y -qq "$deb" >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install ./$(basename "$deb")"; }
[ "$(/usr/bin/poolscope --version)" = "poolscope $upstream" ] || fail "installed --version: $(/usr/bin/poolscope --version)"
[[ "$(/usr/bin/poolscope --help)" == */usr/share/poolscope/capture/poolscope_capture.py* ]] || fail "installed --help: wrong helper path"
/usr/bin/poolscope report "$fixture" >/dev/null || fail "installed report exited $?"
# The dpkg triggers ran: the system's MIME database knows the type, the desktop database offers
# PoolScope for it, the icon cache holds the icon.
got="$(content_type "$work/dump")"
[ "$got" = application/x-pytorch-memory-snapshot ] || fail "after install, GIO calls a snapshot '$got'"
grep -q "^application/x-pytorch-memory-snapshot=.*poolscope.desktop" /usr/share/applications/mimeinfo.cache ||
  fail "mimeinfo.cache does not offer poolscope.desktop for snapshots"
[[ "$(env XDG_DATA_HOME="$work/home" gio mime application/x-pytorch-memory-snapshot)" == *poolscope.desktop* ]] ||
  fail "gio mime lists no poolscope.desktop"
if [ -f /usr/share/icons/hicolor/icon-theme.cache ]; then
  grep -q poolscope /usr/share/icons/hicolor/icon-theme.cache || fail "the hicolor icon cache lacks poolscope"
fi
step "apt install: --version, report, MIME database, desktop database, icon cache: ok"
apt_get purge -y -qq poolscope >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get purge poolscope"; }
installed_by_us=0
[ ! -e /usr/bin/poolscope ] && [ ! -e /usr/share/poolscope ] && [ ! -e /usr/share/applications/poolscope.desktop ] ||
  fail "files left after purge"
[ ! -e /usr/share/mime/application/x-pytorch-memory-snapshot.xml ] || fail "the MIME type outlived the package"
state >"$work/after"
diff -u "$work/before" "$work/after" || fail "the machine differs after install + purge (above)"
step "apt purge: nothing left"
step "passed in $((SECONDS - t0)) s"
