#!/usr/bin/env bash
# Times `myriad policy set` / `clear` moving an existing tree of DIRS x PER small files
# between zones online (docs/zones.md section 3; BENCHMARKS.md), on a local 6-server
# cluster in zones a and b; checks every file reads back and fsck is clean.
# Usage: cargo build --release -p myriad-cli && [DIRS=100 PER=100] scripts/time-tree-move.sh
set -euo pipefail
B=${MYRIAD_BIN:-$(dirname "$0")/../target/release/myriad}
D=$(mktemp -d /tmp/mv.XXXX)
DIRS=${DIRS:-100}; PER=${PER:-100}
mkdir -p $D/src
python3 - "$D/src" $DIRS $PER <<'PY'
import os,sys
root,dirs,per=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
for d in range(dirs):
    os.makedirs(f"{root}/d{d}",exist_ok=True)
    for f in range(per):
        open(f"{root}/d{d}/f{f}","wb").write(os.urandom(4096))
PY
$B cluster up --nodes 6 --zones a,b --data-dir $D/c >/dev/null
export MYRIAD_CLUSTER=$D/c/cluster.json
trap "$B cluster down --data-dir $D/c >/dev/null 2>&1 || true; rm -rf $D" EXIT
$B put $D/src /proj >/dev/null
t0=$(date +%s.%N); $B policy set /proj --zone a; t1=$(date +%s.%N)
echo "set (move in): $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') s"
# a writer probe: one create right after, and the tree's files read back
$B get /proj $D/back >/dev/null
diff -r $D/src $D/back && echo "read back identical"
t0=$(date +%s.%N); $B policy clear /proj; t1=$(date +%s.%N)
echo "clear (move out): $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') s"
rm -rf $D/back; $B get /proj $D/back >/dev/null; diff -r $D/src $D/back && echo "read back identical"
$B fsck | tail -2
