#!/usr/bin/env bash
# End-to-end tests of `cobatch serve` with real clients: curl, the official OpenAI Python SDK and
# the official OpenAI Node SDK, and the chat page in headless Chromium (Selenium; Debian's chromium
# and chromium-driver). Installs the pinned clients once into a cache, then runs pytest.
# usage: run.sh BUILD/cobatch MODEL
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
model="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
cache="${COBATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cobatch}/e2e-$(cat "$here/requirements.txt" "$here/package.json" | sha256sum | cut -c1-12)"
if [ ! -f "$cache/.ready" ]; then
    echo "e2e: installing the pinned clients into $cache" >&2
    rm -rf "$cache"
    mkdir -p "$cache"
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
    cp "$here/package.json" "$cache/"
    (cd "$cache" && npm install --silent --no-audit --no-fund >&2)
    touch "$cache/.ready"
fi
export COBATCH_BIN="$bin" COBATCH_E2E_MODEL="$model" COBATCH_NODE_MODULES="$cache/node_modules"
cd "$here"
exec "$cache/venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "${@:3}"
