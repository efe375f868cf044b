#!/usr/bin/env bash
# Times 20,800 uses of 51 symlinks through a mount (400 rounds of readlink(l), stat(l/f)
# and a stat of 50 symlinks to a file) and prints the kernel's READLINKs that reached the
# mount (issue 51 item 3, FUSE_CACHE_SYMLINKS; BENCHMARKS.md). A local 4-server cluster
# on 127.0.0.1; needs /dev/fuse (run as root).
# Usage: cargo build --release -p myriad-cli && scripts/symlink-uses.sh [BIN]
set -euo pipefail
BIN=${1:-target/release/myriad}
# shellcheck source=scripts/local-cluster.sh
. "$(dirname "$0")/local-cluster.sh"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" mount "$M" --daemon --metrics "127.0.0.1:$PORT" > "$WORK/mount.log" 2>&1
mkdir -p "$M/d" && echo data > "$M/d/f" && ln -s d "$M/l"
for i in $(seq 1 50); do ln -s d/f "$M/s$i"; done
python3 - "$M" <<'PY'
import os, sys, time
m = sys.argv[1]
t = time.time()
for _ in range(400):
    os.readlink(f"{m}/l")
    os.stat(f"{m}/l/f")
    for i in range(1, 51):
        os.stat(f"{m}/s{i}")
dt = time.time() - t
print(f"{400 * 52} symlink uses in {dt:.3f} s: {400 * 52 / dt:.0f}/s")
PY
curl -s "127.0.0.1:$PORT/metrics" | grep 'kernel_requests_total{op="readlink"}' || true
"$BIN" umount "$M"
local_cluster_down
