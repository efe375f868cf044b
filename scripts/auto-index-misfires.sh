#!/usr/bin/env bash
# Counts the automatic indexes one mount builds of a tree it writes, reads hard and removes
# (issue 51 item 5; BENCHMARKS.md "Automatic indexes that do not misfire"): 40 crate
# directories of 36 files, walked and stat'ed three times with `du`, a wait past the quiet
# period, `rm -rf`. Timings compressed: a round every 1 s, quiet 2 s, 4 reads. A local
# 4-server cluster on 127.0.0.1; needs /dev/fuse (run as root).
# With WRITER=other, a second mount (automatic indexing off) writes and removes the tree,
# and the measured mount only reads it: a tree another client wrote, read by one.
# Usage: cargo build --release -p myriad-cli && scripts/auto-index-misfires.sh [BIN]
set -euo pipefail
BIN=${1:-target/release/myriad}
# shellcheck source=scripts/local-cluster.sh
. "$(dirname "$0")/local-cluster.sh"
MYRIAD_LOG=info "$BIN" mount "$M" --auto-index-every 1 --auto-index-quiet-secs 2 \
    --auto-index-min-reads 4 > "$WORK/mount.log" 2>&1 &
MP=$!
for _ in $(seq 1 50); do mountpoint -q "$M" && break; sleep 0.2; done
W=$M
if [ "${WRITER:-self}" = other ]; then
    W=$WORK/writer
    mkdir -p "$W"
    "$BIN" mount "$W" --auto-index-every 0 > "$WORK/writer.log" 2>&1 &
    WP=$!
    for _ in $(seq 1 50); do mountpoint -q "$W" && break; sleep 0.2; done
fi
python3 - "$M" "$W" <<'PY'
import os, sys, time
m, w = sys.argv[1], sys.argv[2]
for c in range(40):
    for s in ("src", "tests", "benches"):
        d = f"{w}/proj/crate{c}/{s}"
        os.makedirs(d, exist_ok=True)
        for f in range(12):
            with open(f"{d}/f{f}.rs", "w") as fh:
                fh.write("fn main() {}\n")
time.sleep(4)
for _ in range(3):
    for root, dirs, files in os.walk(f"{m}/proj"):
        for f in files:
            os.stat(os.path.join(root, f))
    os.system(f"du -s {m}/proj > /dev/null")
time.sleep(8)
PY
rm -rf "$W/proj"
sleep 2
echo "automatic indexes built: $(grep -c 'automatic index built' "$WORK/mount.log" || true)"
"$BIN" umount "$M"; wait "$MP" 2>/dev/null || true
if [ "$W" != "$M" ]; then "$BIN" umount "$W"; wait "$WP" 2>/dev/null || true; fi
local_cluster_down
