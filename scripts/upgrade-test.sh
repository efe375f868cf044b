#!/usr/bin/env bash
# A rolling upgrade from an earlier release (issue 48): builds `myriad` at REV (default:
# the last commit of protocol 29, the version before negotiation) in its own worktree and
# target directory under target/upgrade/, then runs the ignored process test
# deploy::a_rolling_upgrade_from_the_previous_binary_fails_and_loses_no_write, which
# starts three hosts (network namespaces: needs root) with that binary and upgrades them
# one by one to this checkout's, under writes. Not part of scripts/test.sh: the old build
# takes about ten minutes on 2 cores.
#   bash scripts/upgrade-test.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(bash scripts/build-old-release.sh "${1:-b222ef3^}" | tail -1)
MYRIAD_PREV_BIN="$old" cargo test -p myriad-cli --test it --locked -- \
    --ignored --exact --nocapture \
    deploy::a_rolling_upgrade_from_the_previous_binary_fails_and_loses_no_write
