#!/usr/bin/env bash
# One-time (idempotent) set-up of a fresh machine: system packages, the Rust
# toolchain check, the virtualenv and its Python packages. Called by `make`.
set -euo pipefail
cd "$(dirname "$0")/.."

# libbpf-dev, clang, llvm, linux-libc-dev: the AF_XDP engine (crates/voltstream-core/build.rs
# compiles its XDP program and links libbpf; without them that engine is left out).
# dpdk-dev: the DPDK engine, built only with the cargo feature dpdk (make dpdk-test).
# tmux: the test that watches `voltstream status` in a terminal as an operator does.
apt_packages=(iproute2 python3-venv pkg-config libbpf-dev clang llvm linux-libc-dev dpdk-dev tmux)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: warning: missing system packages ${missing[*]} (need root to install)" >&2
  fi
fi

if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
  echo "bootstrap: no Rust toolchain found; installing Debian's cargo" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo rustc >/dev/null
fi
for c in rustfmt clippy; do
  if command -v rustup >/dev/null && ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add "$c" >/dev/null 2>&1 || echo "bootstrap: warning: could not add $c" >&2
  fi
done

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt
