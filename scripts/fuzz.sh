#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/fuzz_targets for N seconds each
# (default 30; `make test` uses 15, `make fuzz SECS=600` runs longer).
#
# Sets up what it needs: a nightly toolchain (rustup, minimal profile) and
# cargo-fuzz (`cargo install --locked`). Anything it cannot set up is an
# error, never a skip. Builds all targets once, then runs each in turn from
# fuzz/corpus/<target> (kept between runs, git-ignored) plus the committed
# seeds in fuzz/seeds/<target>. Every target runs even after one fails; the
# script then exits non-zero and names the crashing inputs.
#
# Environment: VS_FUZZ_TOOLCHAIN pins the nightly (e.g. nightly-2026-05-19;
# default "nightly"), VS_CARGO_FUZZ_VERSION the cargo-fuzz release installed
# when none is (default 0.13.2).
set -euo pipefail
secs="${1:-30}"
toolchain="${VS_FUZZ_TOOLCHAIN:-nightly}"
cargo_fuzz_version="${VS_CARGO_FUZZ_VERSION:-0.13.2}"
cd "$(dirname "$0")/../fuzz"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$HOME/.cargo/bin:$PATH"

fail() {
    echo "fuzz: error: $*" >&2
    exit 1
}

[[ "$secs" =~ ^[1-9][0-9]*$ ]] || fail "seconds per target must be a positive integer, got '$secs'"
command -v rustup >/dev/null ||
    fail "rustup not found: fuzzing needs a nightly toolchain; install rustup (https://rustup.rs)"
if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
    echo "fuzz: installing the $toolchain toolchain (minimal profile)"
    rustup toolchain install "$toolchain" --profile minimal --no-self-update ||
        fail "cannot install the $toolchain toolchain"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz $cargo_fuzz_version"
    cargo install --locked cargo-fuzz --version "$cargo_fuzz_version" ||
        fail "cannot install cargo-fuzz"
fi

# Every file in fuzz_targets must be a target (a missing [[bin]] entry in
# fuzz/Cargo.toml would otherwise leave it out silently).
targets=$(cargo "+$toolchain" fuzz list)
for f in fuzz_targets/*.rs; do
    name=$(basename "$f" .rs)
    grep -qx "$name" <<<"$targets" || fail "$f is not a target in fuzz/Cargo.toml"
done

echo "fuzz: building $(wc -w <<<"$targets") targets"
cargo "+$toolchain" fuzz build || fail "the fuzz targets do not build"

failed=()
for target in $targets; do
    corpus=("corpus/$target")
    mkdir -p "corpus/$target"
    [ -d "seeds/$target" ] && corpus+=("seeds/$target")
    echo "fuzz: $target for ${secs}s"
    # -timeout: an input running longer than 10 s is a hang and fails the run.
    if ! cargo "+$toolchain" fuzz run "$target" "${corpus[@]}" -- \
        -max_total_time="$secs" -max_len=16384 -timeout=10 -print_final_stats=1; then
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}; crashing inputs are in fuzz/artifacts/<target>/" >&2
    echo "fuzz: reproduce with (cd fuzz && cargo +$toolchain fuzz run <target> <file>)" >&2
    exit 1
fi
echo "fuzz: all targets ran ${secs}s each without a failure"
