#!/usr/bin/env bash
# Makes the fixture of it::upgrade_fixture (issue 48: "a data directory written by the
# previous storage format opens"): three servers of an earlier release (default: the
# last commit of protocol 29, as scripts/upgrade-test.sh), started with --init and
# --join on 127.0.0.29-31:7401, given a tree of files with that release's own client,
# then stopped; their data directories and the tree as written are packed into
# crates/myriad-cli/tests/fixtures/REV_NAME.tar.gz. Run it again, with the release before
# a change of the storage format, when the format changes (docs/upgrades.md).
#   bash scripts/make-upgrade-fixture.sh [REV] [NAME]
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:-b222ef3^}"
name="${2:-protocol29}"
old=$(bash scripts/build-old-release.sh "$rev" | tail -1)

work=$(mktemp -d /tmp/myriad-fixture-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# The tree, as the test expects it back.
tree="$work/tree"
mkdir -p "$tree/docs/deep/er/still" "$tree/empty"
for i in $(seq 1 40); do
    printf 'small file %d\n' "$i" > "$tree/docs/f$i.txt"
done
printf 'at the bottom\n' > "$tree/docs/deep/er/still/leaf"
{ yes 'a line of a file bigger than one 4 MiB chunk' || true; } | head -c 5000000 > "$tree/big.bin"

start() { # k, extra args...
    local k=$1
    shift
    mkdir -p "$work/s$k"
    "$old" server --data-dir "$work/s$k/data" --listen "127.0.0.$((28 + k)):7401" "$@" \
        > "$work/s$k/server.log" 2>&1 &
    pids+=($!)
}
my() { "$old" --cluster 127.0.0.29:7401 --secret-file "$work/s1/data/cluster.secret" "$@"; }
# Until `node list` shows N servers, each holding every partition (3 copies of 8).
until_listed() {
    for _ in $(seq 1 120); do
        if my node list 2>/dev/null | awk -v n="$1" -v c="$2" \
            '$1 ~ /^[0-9]+$/ && $4 == "up" && $5 >= c {k++} END {exit !(k == n)}'; then
            return 0
        fi
        sleep 1
    done
    echo "the old release's cluster did not come up: $1 servers" >&2
    tail -n 20 "$work"/s*/server.log >&2
    exit 1
}
start 1 --init --partitions 8
for _ in $(seq 1 100); do [ -f "$work/s1/data/client.key" ] && break; sleep 0.1; done
until_listed 1 8
# One after the other, each tried again on a fresh directory while it gives up: that
# release's join does not wait for a first server still settling.
join() { # k
    for _ in 1 2 3 4 5; do
        rm -rf "$work/s$1"
        start "$1" --join 127.0.0.29:7401 --secret-file "$work/s1/data/cluster.secret"
        sleep 3
        if kill -0 "${pids[-1]}" 2>/dev/null; then
            until_listed "$1" 8
            return 0
        fi
        unset 'pids[-1]'
        pids=("${pids[@]}")
        sleep 2
    done
    echo "server $1 of the old release could not join" >&2
    exit 1
}
join 2
join 3
my node list
my put "$tree" /fixture
my chmod 700 /fixture/docs/deep
my chown 1000:1000 /fixture/docs/f1.txt
my ln -s docs/f2.txt /fixture/link
my ln /fixture/docs/f3.txt /fixture/hard
my mv /fixture/docs/f4.txt /fixture/moved.txt
my rm /fixture/docs/f5.txt
my ls -l /fixture
# A planned stop of each (SIGTERM), the last one first.
for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[$i]}"
    wait "${pids[$i]}" || true
done
pids=()
mkdir -p crates/myriad-cli/tests/fixtures
out="crates/myriad-cli/tests/fixtures/$name.tar.gz"
tar -C "$work" --exclude='*.log' -czf "$out" s1 s2 s3 tree
echo "wrote $out ($(du -h "$out" | cut -f1)) from $rev"
