#!/usr/bin/env bash
# Runs every fuzz target for N seconds each (default 30) with cargo-fuzz on
# nightly. Where nightly or cargo-fuzz is missing it says so and exits 0: the
# stable `cargo test` no-panic loops in each parser still run in CI.
set -euo pipefail
secs="${1:-30}"
cd "$(dirname "$0")/../fuzz"
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: skipped, no nightly toolchain (rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: skipped, cargo-fuzz not installed (cargo install cargo-fuzz)"
    exit 0
fi
for target in $(cargo +nightly fuzz list); do
    echo "fuzz: $target for ${secs}s"
    cargo +nightly fuzz run "$target" -- -max_total_time="$secs" -max_len=16384
done
