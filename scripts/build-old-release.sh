#!/usr/bin/env bash
# Builds `myriad` at REV (default: the last commit of protocol 29) in its own worktree and
# target directory under target/upgrade/ (about ten minutes on 2 cores the first time) and
# prints the binary's path last. Used by upgrade-test.sh and make-upgrade-fixture.sh.
#   bash scripts/build-old-release.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:-b222ef3^}"
base="$PWD/target/upgrade"
src="$base/src"
mkdir -p "$base"
if [ -d "$src" ]; then
    git -C "$src" checkout --quiet --detach "$rev"
else
    git worktree add --quiet --detach "$src" "$rev"
fi
echo "building myriad at $(git -C "$src" log --oneline -1)" >&2
(cd "$src" && CARGO_TARGET_DIR="$base/target" cargo build --locked -p myriad-cli --bin myriad >&2)
echo "$base/target/debug/myriad"
