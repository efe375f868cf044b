#!/usr/bin/env bash
# git through a mount with automatic indexing off and on (issue 51 item 5: "show in A/B
# that ... git clone are not slower with automatic indexes on than off"): one mount per
# setting on a local 4-server cluster, `git clone --no-local` of REPO (this repository by
# default: a pack written and unpacked, a checkout), `git status`, a second walk of the
# tree (`git status` again after a pause past the quiet period), `rm -rf`; each phase
# timed, and the automatic indexes the mount built counted. Automatic indexing at
# compressed timings (a round every 1 s, quiet 2 s, 4 reads), as in
# auto-index-misfires.sh. Needs /dev/fuse (run as root).
# Usage: cargo build --release -p myriad-cli && scripts/auto-index-git.sh [BIN] [REPO]
# (MODES="on off" runs the mount with automatic indexing first.)
set -euo pipefail
BIN=${1:-target/release/myriad}
REPO=$(realpath "${2:-$(dirname "$0")/..}")
BIN=$(realpath "$BIN")
# shellcheck source=scripts/local-cluster.sh
. "$(dirname "$0")/local-cluster.sh"
# Milliseconds `$@` took.
t() { local s; s=$(date +%s%N); "$@" > /dev/null 2>&1; echo $((($(date +%s%N) - s) / 1000000)); }
for mode in ${MODES:-off on}; do
    if [ "$mode" = on ]; then
        flags=(--auto-index-every 1 --auto-index-quiet-secs 2 --auto-index-min-reads 4)
    else
        flags=(--auto-index-every 0)
    fi
    MYRIAD_LOG=info "$BIN" mount "$M" "${flags[@]}" > "$WORK/mount-$mode.log" 2>&1 &
    MP=$!
    for _ in $(seq 1 50); do mountpoint -q "$M" && break; sleep 0.2; done
    clone=$(t git clone -q --no-local "$REPO" "$M/g")
    status=$(t git -C "$M/g" status --porcelain)
    sleep 4
    again=$(t git -C "$M/g" status --porcelain)
    rm=$(t rm -rf "$M/g")
    built=$(grep -c 'automatic index built' "$WORK/mount-$mode.log" || true)
    echo "auto-index $mode: clone ${clone} ms, status ${status} ms, status after a pause ${again} ms, rm -rf ${rm} ms; automatic indexes built: $built"
    "$BIN" umount "$M"; wait "$MP" 2>/dev/null || true
done
local_cluster_down
