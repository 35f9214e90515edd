"""Metrics and timeline of real jobs through `tandem launch` (docs/metrics.md):
with TANDEM_METRICS_PORT every process answers GET /metrics while the job
runs, the text passes `promtool check metrics`, counters and histogram
counts never go down between two scrapes, the traffic, latency and
heartbeat metrics carry the labels role and rank; with TANDEM_TIMELINE the
launcher leaves one Chrome trace (valid JSON) with one track per rank."""

from __future__ import annotations

import json
import os
import re
import signal
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port

SERVING = re.compile(r"^\[(\w+(?: \d+)?)\].*serving metrics at http://127\.0\.0\.1:(\d+)/metrics",
                     re.M)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        # prometheus-cpp's exposer says "text/plain; charset=utf-8", which
        # Prometheus reads as the text format 0.0.4.
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def promtool_ok(text: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def monotonic(before: dict[str, float], after: dict[str, float]) -> int:
    """Every counter, histogram bucket, count and sum of `before` is in `after`
    and not smaller; returns how many were compared."""
    compared = 0
    for name, value in before.items():
        base = name.split("{")[0]
        if base.endswith(("_total", "_bucket", "_count", "_sum")):
            assert name in after, name
            assert after[name] >= value, (name, value, after[name])
            compared += 1
    return compared


def wait_for_endpoints(job, names: list[str], timeout: float = 30) -> dict[str, int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = {label: int(port) for label, port in SERVING.findall(job.output)}
        if all(n in found for n in names):
            return found
        time.sleep(0.1)
    raise AssertionError(f"not every process said where it serves metrics:\n{job.describe()}")


def series(s: dict[str, float], name: str, **labels: str) -> list[float]:
    """Values of every series of `name` whose labels include `labels`."""
    out = []
    for key, value in s.items():
        if key.split("{")[0] != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', key))
        if all(have.get(k) == v for k, v in labels.items()):
            out.append(value)
    return out


METRICS_ENV = {"TANDEM_METRICS_PORT": "0", "TANDEM_METRICS_ADDRESS": "127.0.0.1",
               "PS_HEARTBEAT_INTERVAL": "0.2"}


@pytest.mark.parametrize("resend", [False, True])
def test_parameter_server_job_serves_metrics_while_it_runs(launch, tandem_bin_dir, resend):
    workers, servers = 2, 1
    env = {**METRICS_ENV, "PS_RESEND": "1" if resend else "0"}
    job = launch.start(workers, servers,
                       [tandem_bin_dir / "kvstore_check", "--scenario", "steady", "--rounds", "40"],
                       env=env)
    ports = wait_for_endpoints(job, ["worker 0", "worker 1", "server 0", "scheduler"])
    time.sleep(1.0)
    first = {label: scrape(port) for label, port in ports.items()}
    time.sleep(1.0)
    second = {label: scrape(port) for label, port in ports.items()}
    assert job.wait(timeout=60) == 0, job.describe()

    tri = workers * (workers + 1) // 2
    last = re.findall(r"\[worker \d\] kvstore_check: steady last (\S+)", job.output)
    assert len(last) == workers
    for line in last:
        assert [float(v) for v in line.split(",")] == [tri * (i % 7 + 40) for i in range(64)]

    for label, text in second.items():
        promtool_ok(text)
        promtool_ok(first[label])
        before, after = samples(first[label]), samples(text)
        assert monotonic(before, after) > 20, label
        role, _, rank = label.partition(" ")
        ours = [name for name in after if name.startswith("tandem_")]
        assert len(ours) > 20, label
        for name in ours:  # (the exposer adds its own exposer_* metrics)
            assert f'role="{role}"' in name and f'rank="{rank or 0}"' in name, (label, name)
    w0 = samples(second["worker 0"])
    # A worker talks to the server (kv) and to the scheduler (cluster).
    assert series(w0, "tandem_sent_bytes_total", peer_role="server", service="kv")[0] > 0
    assert series(w0, "tandem_received_messages_total", peer_role="server", service="kv")[0] > 0
    assert series(w0, "tandem_sent_messages_total", peer_role="scheduler", service="cluster")[0] > 0
    # Push and pull latencies: one request per round each (one server), so far.
    pushes = series(w0, "tandem_kv_request_duration_seconds_count", op="push")
    pulls = series(w0, "tandem_kv_request_duration_seconds_count", op="pull")
    assert pushes and 5 <= pushes[0] <= 40, pushes
    assert pulls and 5 <= pulls[0] <= 40, pulls
    assert series(w0, "tandem_kv_requests_outstanding") != []
    # Heartbeats arrive every 0.2 s: the scheduler was heard from recently.
    age = series(w0, "tandem_heartbeat_age_seconds", peer_role="scheduler")
    assert age and 0 <= age[0] < 5, age
    sched = samples(second["scheduler"])
    ages = series(sched, "tandem_heartbeat_age_seconds", peer_role="worker")
    assert len(ages) == workers and all(0 <= a < 5 for a in ages), ages
    s0 = samples(second["server 0"])
    assert series(s0, "tandem_received_bytes_total", peer_role="worker", service="kv")[0] > 0
    queued = series(s0, "tandem_kv_server_queued_requests")
    assert len(queued) == 1 and 0 <= queued[0] <= 2 * workers, queued
    # The reliable layer's counters exist exactly when it is on.
    for s in (w0, s0, sched):
        assert len(series(s, "tandem_retransmits_total")) == (1 if resend else 0)
        assert len(series(s, "tandem_unacknowledged_messages")) == (1 if resend else 0)


def test_collectives_job_metrics_and_timeline(launch, tandem_bin_dir, tmp_path):
    workers = 3
    trace = tmp_path / "trace.json"
    # A fixed base port: the processes of one host take the free ports from it on.
    base = free_port()
    if base > 65535 - 64:
        base -= 64
    env = {**METRICS_ENV, "TANDEM_METRICS_PORT": str(base), "TANDEM_TIMELINE": str(trace)}
    job = launch.start(workers, 0, [tandem_bin_dir / "collective_check", "--steady", "30"],
                       env=env, extra_args=["--no-scheduler"])
    ports = wait_for_endpoints(job, [f"worker {r}" for r in range(workers)])
    assert len(set(ports.values())) == workers, ports
    assert all(base <= p < base + 64 for p in ports.values()), (base, ports)
    time.sleep(1.0)
    first = {label: scrape(port) for label, port in ports.items()}
    time.sleep(1.0)
    second = {label: scrape(port) for label, port in ports.items()}
    assert job.wait(timeout=60) == 0, job.describe()
    for r in range(workers):
        assert f"[worker {r}] collective_check: ok rank={r} size={workers} checks=30" in job.output

    for label, text in second.items():
        promtool_ok(text)
        assert monotonic(samples(first[label]), samples(text)) > 10
        s = samples(text)
        done = series(s, "tandem_collective_duration_seconds_count", op="allreduce")
        assert done and 3 <= done[0] <= 30, (label, done)
        assert series(s, "tandem_sent_bytes_total", peer_role="worker",
                      service="collective")[0] > 0
        assert series(s, "tandem_collective_queued_operations") == [0.0]

    # One trace file, merged by the launcher; one process track per rank,
    # each with its 30 allreduces as complete events.
    assert (f"timeline: merged {workers} of {workers} processes" in job.output
            and f"into {trace}" in job.output), job.output
    check_collectives_trace(trace, workers, 30)
    assert not list(tmp_path.glob("trace.json.*")), "per-process files left behind"


def check_collectives_trace(trace: Path, workers: int, allreduces: int) -> None:
    """`trace` is one valid JSON Chrome trace with one process track per
    rank, named `worker <rank>`, each with its `allreduces` allreduces of
    `collective_check --steady` as complete events."""
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert sorted(names.values()) == [f"worker {r}" for r in range(workers)], names
    for pid in names:
        spans = [e for e in events if e.get("pid") == pid and e.get("ph") == "X"
                 and e.get("name") == "allreduce"]
        assert len(spans) == allreduces, (names[pid], len(spans))
        assert all(e["dur"] >= 0 and e["ts"] > 0 for e in spans)
        assert all(e["args"]["what"].startswith("AllReduce") for e in spans), spans[0]


def test_timeline_merge_command_joins_the_files_of_a_job(tandem_bin_dir, tmp_path):
    """`tandem timeline merge` joins the per-process files of a job whose
    processes no launcher merged (here started by hand with tandem's own
    contract, as on hosts with disks of their own)."""
    from test_contracts_start import run_processes, tandem_envs
    workers = 3
    trace = tmp_path / "trace.json"
    envs = tandem_envs(workers, free_port())
    for env in envs:
        env["TANDEM_TIMELINE"] = str(trace)
    results = run_processes([tandem_bin_dir / "collective_check", "--steady", "5"], envs, tmp_path)
    assert all(code == 0 for code, _ in results), results
    files = sorted(tmp_path.glob("trace.json.*"))
    assert len(files) == workers, files
    merged = tmp_path / "merged.json"
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), "timeline", "merge", "-o", str(merged),
                           *map(str, files)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert (f"timeline of {workers} processes (" in proc.stderr
            and f"written to {merged}" in proc.stderr), proc.stderr
    check_collectives_trace(merged, workers, 5)
    # Files of two hosts may hold the same pid: each keeps a track of its own.
    twice = tmp_path / "twice.json"
    subprocess.run([str(tandem_bin_dir / "tandem"), "timeline", "merge", "-o", str(twice),
                    str(files[0]), str(files[0])], check=True, capture_output=True, timeout=30)
    events = json.loads(twice.read_text())["traceEvents"]
    tracks = {e["pid"] for e in events if e.get("name") == "process_name"}
    assert len(tracks) == 2, tracks
    # An unfinished file (a killed process's) gives its complete events.
    (tmp_path / "cut").write_text('{"traceEvents": [\n{"name": "x", "ph": "i", "pid": 7}')
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), "timeline", "merge", "-o", str(merged),
                           str(files[0]), str(tmp_path / "cut")], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert f"{tmp_path / 'cut'} was unfinished (its complete events kept)" in proc.stderr
    assert any(e.get("pid") == 7 for e in json.loads(merged.read_text())["traceEvents"])
    # An empty file (killed before its first write) is named as missing.
    (tmp_path / "empty").write_text("")
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), "timeline", "merge", "-o", str(merged),
                           str(files[0]), str(tmp_path / "empty")], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0 and f"{tmp_path / 'empty'} was empty" in proc.stderr, proc.stderr
    assert json.loads(merged.read_text())["otherData"]["tandem_missing"] == [
        str(tmp_path / "empty")]
    # A file that is not a trace is refused, naming it.
    (tmp_path / "broken").write_text('no trace at all')
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), "timeline", "merge", "-o", str(merged),
                           str(files[0]), str(tmp_path / "broken")], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode != 0 and f"{tmp_path / 'broken'} is not a trace file" in proc.stderr


def test_timeline_after_a_kill_holds_the_survivors_and_names_the_killed(launch, tandem_bin_dir,
                                                                       tmp_path):
    """Worker 1 of a collectives job is killed with SIGKILL while it runs:
    the job fails, and the launcher still merges the timeline, with both
    survivors' tracks and their allreduces, and names worker 1 (its file
    was never closed) on its line and in the trace's otherData."""
    trace = tmp_path / "trace.json"
    job = launch.start(3, 0, [tandem_bin_dir / "collective_check", "--steady", "100000"],
                       env={"TANDEM_TIMELINE": str(trace)}, extra_args=["--no-scheduler"])
    deadline = time.monotonic() + 60
    while "[worker 1]" not in job.output and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # some allreduces done
    victim = [p for p in job.role_processes("worker") if p.env.get("DMLC_WORKER_ID") == "1"]
    assert victim, job.describe()
    os.kill(victim[0].pid, signal.SIGKILL)
    assert job.wait(timeout=60) != 0, job.describe()
    line = [l for l in job.output.splitlines() if "timeline: merged" in l]
    assert len(line) == 1, job.output
    assert "of 3 processes" in line[0] and f"into {trace}" in line[0], line[0]
    assert "worker 1" in line[0].split("; ", 1)[1], line[0]
    doc = json.loads(trace.read_text())
    other = doc["otherData"]
    assert "worker 1" in other["tandem_missing"] + other["tandem_unfinished"], other
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    for survivor in ("worker 0", "worker 2"):
        pids = [pid for pid, name in names.items() if name == survivor]
        assert len(pids) == 1, names
        spans = [e for e in doc["traceEvents"] if e.get("pid") == pids[0]
                 and e.get("ph") == "X" and e.get("name") == "allreduce"]
        assert spans, f"no allreduce of {survivor} in the merged trace"
    assert not list(tmp_path.glob("trace.json.*")), "per-process files left behind"
