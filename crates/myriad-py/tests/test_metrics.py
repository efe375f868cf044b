"""Every server's metrics endpoint, scraped and parsed by Prometheus's own text parser
(OpenMetrics), and `myriad top --once` against the same cluster."""

import json
import pathlib
import re
import subprocess
import urllib.request

import pytest

from conftest import myriad_bin

parser = pytest.importorskip("prometheus_client.openmetrics.parser")

FAMILIES = {
    "myriad_requests": "counter",
    "myriad_request_duration_seconds": "histogram",
    "myriad_fsync_batch_mutations": "histogram",
    "myriad_fsyncs": "counter",
    "myriad_partitions": "gauge",
    "myriad_partitions_with_copies_behind": "gauge",
    "myriad_partitions_under_replicated": "gauge",
    "myriad_copies_catching_up": "gauge",
    "myriad_copy_batches_behind": "gauge",
    "myriad_copy_bytes_behind": "gauge",
    "myriad_copies_being_made_whole": "gauge",
    "myriad_lease_recalls": "counter",
    "myriad_disk_reserve_bytes": "gauge",
    "myriad_popularity_replicas": "gauge",
    "myriad_directory_splits": "counter",
    "myriad_disk_bytes": "gauge",
    "myriad_zone_requests": "counter",
    "myriad_zone_bytes": "counter",
    "myriad_cross_zone_bytes": "counter",
    "myriad_map_epoch": "gauge",
    "myriad_raft_leader": "gauge",
    "myriad_serving": "gauge",
    "myriad_server_info": "gauge",
}


def endpoints(cluster):
    data = pathlib.Path(cluster).parent
    addrs = sorted((data / d.name / "metrics.addr").read_text().strip()
                   for d in data.iterdir() if d.name.startswith("node-") and d.is_dir())
    assert len(addrs) == 3, addrs
    return addrs


def scrape(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        text = r.read().decode()
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def total(families, name, **labels):
    return sum(s.value for s in families[name].samples
               if s.name == name + "_total" and all(s.labels.get(k) == v
                                                    for k, v in labels.items()))


def test_every_server_serves_the_expected_families(cluster, client, tree):
    for addr in endpoints(cluster):
        fams = scrape(addr)
        for name, kind in FAMILIES.items():
            assert name in fams, f"{name} missing at {addr}"
            assert fams[name].type == kind, (name, fams[name].type)
        parts = {s.labels["role"]: s.value for s in fams["myriad_partitions"].samples}
        assert set(parts) == {"primary", "copy"} and parts["primary"] > 0
        disk = {(s.labels["tier"], s.labels["state"]): s.value
                for s in fams["myriad_disk_bytes"].samples}
        assert disk[("all", "total")] >= disk[("all", "free")] > 0
        assert fams["myriad_serving"].samples[0].value == 1


def test_requests_are_counted_by_operation_and_outcome(cluster, client, tree):
    before = [scrape(a) for a in endpoints(cluster)]
    client.write(f"{tree}/f", b"x")
    for _ in range(20):
        client.fetch(f"{tree}/f")
    for _ in range(5):
        with pytest.raises(FileNotFoundError):
            client.fetch(f"{tree}/missing")
    after = [scrape(a) for a in endpoints(cluster)]

    def summed(scrapes, **labels):
        return sum(total(f, "myriad_requests", **labels) for f in scrapes)

    ok = summed(after, op="fetch", outcome="ok") - summed(before, op="fetch", outcome="ok")
    missing = (summed(after, op="fetch", outcome="not_found")
               - summed(before, op="fetch", outcome="not_found"))
    assert ok >= 20 and missing >= 5, (ok, missing)
    # The latency histogram counted them too, and its buckets are cumulative.
    fetches = [s for f in after for s in f["myriad_request_duration_seconds"].samples
               if s.labels.get("op") == "fetch" and s.labels.get("from") == "client"]
    count = sum(s.value for s in fetches if s.name.endswith("_count"))
    assert count >= 25
    syncs = sum(total(f, "myriad_fsyncs") for f in after)
    assert syncs > 0


def test_a_path_other_than_metrics_is_404(cluster):
    addr = endpoints(cluster)[0]
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{addr}/nothing", timeout=10)
    assert e.value.code == 404


def test_top_once_shows_every_server(cluster):
    out = subprocess.run([myriad_bin(), "top", "--once", "--cluster", cluster],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    nodes = json.loads(pathlib.Path(cluster).read_text())["nodes"]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("servers ok ") and "map epoch" in lines[0] and "cluster " in lines[0]
    for n in nodes:
        row = [line for line in lines if n["addr"] in line]
        assert len(row) == 1 and " ok " in row[0], (n, out.stdout)
    assert "servers ok 3/3" in lines[0]
    assert lines[1].startswith("healthy"), out.stdout


def test_top_once_fits_80_columns_with_every_number_whole(cluster):
    import os

    env = dict(os.environ, COLUMNS="80")
    out = subprocess.run([myriad_bin(), "top", "--once", "--cluster", cluster],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), out.stdout
    header = lines[2].split()
    assert header[:2] == ["id", "address"] and header[-1] == "disk", header
    nodes = json.loads(pathlib.Path(cluster).read_text())["nodes"]
    for n in nodes:
        row = [line for line in lines if n["addr"] in line]
        assert len(row) == 1, (n, out.stdout)
        # The disk column: a whole percentage and a size with its unit.
        assert re.search(r"\d+% of \d+(\.\d)? [KMGT]?i?B", row[0]), row[0]
        assert "…" not in row[0]


def test_cluster_status_lists_every_metrics_address(cluster):
    out = subprocess.run([myriad_bin(), "cluster", "status", "--cluster", cluster],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for addr in endpoints(cluster):
        assert f"metrics: http://{addr}/metrics" in out.stdout, out.stdout


def test_a_restarted_server_serves_its_metrics_where_it_did(tmp_path):
    """A server started with --metrics on any free port (as `cluster up --metrics` and
    `cluster start-node` start it) takes the address of its last run again, so a scraper's
    configuration never changes."""
    import json
    import os
    import signal
    import time

    data = tmp_path / "c"
    up = subprocess.run([myriad_bin(), "cluster", "up", "--nodes", "3", "--metrics",
                         "--data-dir", str(data)], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        before = (data / "node-2" / "metrics.addr").read_text().strip()
        scrape(before)
        state = json.loads((data / "cluster-state.json").read_text())
        pid = [n["pid"] for n in state["nodes"] if n["id"] == 2][0]
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
                time.sleep(0.1)
            except ProcessLookupError:
                break
        restart = subprocess.run([myriad_bin(), "cluster", "start-node", "--data-dir", str(data),
                                  "--node", "2"], capture_output=True, text=True, timeout=120)
        assert restart.returncode == 0, restart.stderr
        # The server binds its metrics as it starts serving: give it a moment.
        deadline = time.time() + 20
        while True:
            try:
                fams = scrape(before)
                break
            except OSError:
                assert time.time() < deadline, (data / "node-2.log").read_text()[-3000:]
                time.sleep(0.2)
        assert "myriad_serving" in fams
        assert (data / "node-2" / "metrics.addr").read_text().strip() == before
    finally:
        subprocess.run([myriad_bin(), "cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=120)


def _scrapes(data):
    """The families of every server of the local cluster in `data` that answers."""
    for d in sorted(data.glob("node-*/metrics.addr")):
        try:
            yield scrape(d.read_text().strip())
        except OSError:
            continue


def _health(data):
    """(partitions under-replicated summed over servers, the leader's servers-down) of the
    local cluster in `data`, scraping every server that answers."""
    under, down = 0, None
    for fams in _scrapes(data):
        under += sum(s.value for s in fams["myriad_partitions_under_replicated"].samples)
        if "myriad_cluster_servers_down" in fams:
            down = fams["myriad_cluster_servers_down"].samples[0].value
    return under, down


def _copy_lag(data):
    """(batches, bytes) copies still lack, summed over the servers that answer."""
    scrapes = list(_scrapes(data))
    return tuple(sum(s.value for fams in scrapes for s in fams[name].samples)
                 for name in ["myriad_copy_batches_behind", "myriad_copy_bytes_behind"])


def test_under_replication_rises_when_a_server_dies_and_clears_when_it_returns(tmp_path):
    import json
    import os
    import signal
    import time

    import myriad

    data = tmp_path / "c"
    up = subprocess.run([myriad_bin(), "cluster", "up", "--nodes", "4", "--metrics",
                         "--data-dir", str(data)], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        c = myriad.Client(str(data / "cluster.json"))
        c.mkdir("/h")
        assert _health(data) == (0, 0)
        state = json.loads((data / "cluster-state.json").read_text())
        pid = [n["pid"] for n in state["nodes"] if n["id"] == 3][0]
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 30
        while _health(data)[0] == 0 or _health(data)[1] != 1:
            assert time.time() < deadline, _health(data)
            time.sleep(0.5)
        # Writes go on while it is down; its copies are behind when it returns.
        c.write_many({f"/h/f{i}": b"x" * 100 for i in range(200)})
        restart = subprocess.run([myriad_bin(), "cluster", "start-node", "--data-dir", str(data),
                                  "--node", "3"], capture_output=True, text=True, timeout=120)
        assert restart.returncode == 0, restart.stderr
        deadline = time.time() + 60
        while _health(data) != (0, 0):
            assert time.time() < deadline, _health(data)
            time.sleep(0.5)
        # Caught up: no batch is left for any copy to take (the writes made while it was
        # down went to it), once the streams have their acknowledgements.
        deadline = time.time() + 30
        while _copy_lag(data) != (0, 0):
            assert time.time() < deadline, _copy_lag(data)
            time.sleep(0.5)
        # The servers' logs (info, the default) tell the story: the failover, the new
        # primaries, the copies caught up.
        logs = "".join((data / f"node-{i}.log").read_text() for i in (1, 2, 4))
        for event in ["marking it down", "serving as primary", "copies caught up"]:
            assert event in logs, event
    finally:
        subprocess.run([myriad_bin(), "cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=120)

