# Sourced by the measurement scripts (auto-index-misfires.sh, symlink-uses.sh): a local
# 4-server cluster of `$BIN` on 127.0.0.1 in a fresh directory. Sets WORK (the directory),
# D (the servers' data), M (an empty mount point) and MYRIAD_CLUSTER; `local_cluster_down`
# stops the servers and removes WORK.
WORK=$(mktemp -d)
D=$WORK/cluster
M=$WORK/mnt
mkdir -p "$M"
"$BIN" cluster up --nodes 4 --data-dir "$D" > "$WORK/up.log" 2>&1
export MYRIAD_CLUSTER=$D/cluster.json

local_cluster_down() {
    "$BIN" cluster down --data-dir "$D" > /dev/null 2>&1 || true
    rm -rf "$WORK"
}
