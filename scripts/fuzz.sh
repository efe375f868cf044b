#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (one per decoder family, fuzz/fuzz_targets/) for a
# bounded time each: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 30)
#
# * Builds all targets once (release, debug assertions and overflow checks on, AddressSanitizer:
#   cargo-fuzz's defaults), with nightly if rustup has it, else stable with RUSTC_BOOTSTRAP=1.
# * Runs each target on a fresh copy of its committed corpus (fuzz/corpus-run/<target>, where
#   new inputs go; git-ignored) plus the committed corpus (fuzz/corpus/<target>) as seeds, so a
#   run never grows the committed corpus. Regenerate seeds: cargo run --manifest-path
#   fuzz/Cargo.toml --example make_seeds.
# * Exits non-zero if any target found a crash, a panic, a leak, a timeout or an out-of-memory;
#   the failing input stays in fuzz/artifacts/<target>/ and its path is printed.
#
# Environment: FUZZ_TARGETS="a b" runs only those; FUZZ_LOCKED=1 refuses a stale
# fuzz/Cargo.lock (as --locked); FUZZ_TIMEOUT_S (default 20) is the longest one input may run.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-30}"
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (a positive whole number; got '$secs')" >&2
    exit 2
fi
timeout_s="${FUZZ_TIMEOUT_S:-20}"

# libfuzzer-sys compiles libFuzzer (C++).
if ! command -v c++ >/dev/null 2>&1; then
    echo "fuzz: no C++ compiler; installing g++"
    apt-get update && apt-get install -y g++
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing; installing it (cargo install cargo-fuzz --locked)"
    nice -n 19 cargo install cargo-fuzz --locked
fi

# libFuzzer instrumentation needs nightly flags (-Zsanitizer, sanitizer coverage).
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    cargo=(nice -n 19 cargo +nightly)
    echo "fuzz: toolchain nightly ($(rustup run nightly rustc --version))"
else
    export RUSTC_BOOTSTRAP=1
    cargo=(nice -n 19 cargo)
    echo "fuzz: no nightly toolchain; stable with RUSTC_BOOTSTRAP=1 ($(rustc --version))"
fi

if [ "${FUZZ_LOCKED:-0}" = 1 ]; then
    if ! "${cargo[@]}" metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null; then
        echo "fuzz: fuzz/Cargo.lock is out of date; run 'cargo update --workspace --manifest-path fuzz/Cargo.toml' and commit it" >&2
        exit 1
    fi
fi

if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    mapfile -t targets < <(cargo fuzz list)
fi
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz: no fuzz targets found in fuzz/" >&2
    exit 1
fi

# cargo-fuzz builds for x86_64-unknown-linux-gnu unless told otherwise: build for this host.
triple=$(rustc -vV | sed -n 's/^host: //p')
bin_dir="fuzz/target/$triple/release"

echo "fuzz: building ${#targets[@]} targets: ${targets[*]}"
build_start=$SECONDS
# Defaults: optimized, debug assertions and overflow checks on, AddressSanitizer.
"${cargo[@]}" fuzz build --target "$triple"
echo "fuzz: build took $((SECONDS - build_start)) s"

failed=()
run_start=$SECONDS
for t in "${targets[@]}"; do
    seeds="fuzz/corpus/$t"
    work="fuzz/corpus-run/$t"
    rm -rf "$work"
    mkdir -p "$work" "fuzz/artifacts/$t"
    if [ -d "$seeds" ]; then
        cp -R "$seeds/." "$work/"
    else
        echo "fuzz: warning: $t has no committed seed corpus ($seeds)" >&2
        seeds=""
    fi
    echo "fuzz: === $t: ${secs} s ($(find "$work" -type f | wc -l) seed inputs) ==="
    log="fuzz/corpus-run/$t.log"
    # The binaries built above, run directly (`cargo fuzz run` would rebuild first, so a
    # source edit during the run could fail a target for a reason that is no finding).
    # libFuzzer writes new inputs to the first corpus directory only.
    if nice -n 19 "$bin_dir/$t" -artifact_prefix="fuzz/artifacts/$t/" \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout="$timeout_s" \
        -print_final_stats=1 "$work" ${seeds:+"$seeds"} >"$log" 2>&1; then
        runs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
        cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
        echo "fuzz: $t: ok (${runs:-no summary}; ${cov:-no coverage line})"
    else
        failed+=("$t")
        echo "fuzz: $t: FAILED; the end of its log ($log):" >&2
        tail -n 60 "$log" >&2
        grep -A1 -m1 'panicked at' "$log" >&2 || true
        artifact=$(grep -Eo 'Test unit written to [^ ]+' "$log" | tail -1 | sed 's/^Test unit written to //' || true)
        echo "fuzz: $t: failing input: ${artifact:-none written, see $log}" >&2
        if [ -n "$artifact" ]; then
            echo "fuzz: reproduce: ${RUSTC_BOOTSTRAP:+RUSTC_BOOTSTRAP=1 }${cargo[*]:3} fuzz run $t $artifact   (or: $bin_dir/$t $artifact)" >&2
        fi
    fi
done
echo "fuzz: running ${#targets[@]} targets took $((SECONDS - run_start)) s"

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} target(s) found problems: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz: no findings in ${#targets[@]} targets x ${secs} s"
