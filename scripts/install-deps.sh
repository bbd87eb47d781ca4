#!/usr/bin/env bash
# Installs what flashbox needs to build and test, from Debian's packages and the npm registry.
# Idempotent: does nothing when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libomp-dev
          libopenblas-dev nodejs npm chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# nodejs from nodesource already ships npm; do not ask Debian for a second one.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ -f web/package.json ] && [ ! -d web/node_modules ]; then
  echo "install-deps: npm ci in web/"
  (cd web && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ -f tests/gpt2/node/package.json ] && [ ! -d tests/gpt2/node/node_modules ]; then
  echo "install-deps: npm ci in tests/gpt2/node/ (GPT-2 tokenizer files and reference)"
  (cd tests/gpt2/node && npm ci --no-audit --no-fund --loglevel=error)
fi
