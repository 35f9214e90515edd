"""tandem's parameter server through `tandem launch -n 4 -s 2` on loopback:
tests/programs/kvstore_check runs a scenario on every worker (the servers
are tandem's own `tandem server`) and prints what it pulled; this file
recomputes every number in closed form, or with its own reference
quantiser for compressed pushes, and compares exactly."""

from __future__ import annotations

import re
import struct

import pytest

WORKERS = 4
SERVERS = 2
LINE = re.compile(r"^\[worker (\d+)\] kvstore_check: (.+?) (sum=\S+ at=\S+|\S+)$", re.M)
TRI = WORKERS * (WORKERS + 1) // 2  # sum of (rank + 1)


def f32(x: float) -> float:
    """x rounded to float32 (the servers and workers compute in float32)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(launch, tandem_bin_dir, scenario, tmp_path=None, env=None, timeout=60, launcher="local",
        launcher_env=None, servers=SERVERS, wrap=None, extra_args=()):
    """Runs kvstore_check's `scenario`; `wrap` (a function of the argv) may
    put a wrapper around it."""
    args = [str(tandem_bin_dir / "kvstore_check"), "--scenario", scenario]
    if tmp_path is not None:
        args += ["--dir", str(tmp_path)]
    if wrap is not None:
        args = wrap(args)
    result = launch(WORKERS, servers, args, env=env or {}, timeout=timeout, launcher=launcher,
                    launcher_env=launcher_env, extra_args=extra_args)
    assert result.returncode == 0, result.job.describe()
    for rank in range(WORKERS):
        assert (f"[worker {rank}] kvstore_check: done scenario={scenario} rank={rank} "
                f"workers={WORKERS} servers={servers}") in result.output, result.output
    seen: dict[int, dict[str, str]] = {r: {} for r in range(WORKERS)}
    for rank, label, value in LINE.findall(result.output):
        seen[int(rank)][label] = value
    return result.output, seen


def check_all(seen, label, expected):
    """Every worker printed exactly `expected` (a list) under `label`."""
    for rank in range(WORKERS):
        assert label in seen[rank], (rank, label, list(seen[rank]))
        got = [float(v) for v in seen[rank][label].split(",")]
        assert got == [float(e) for e in expected], f"worker {rank}: {label}"


def check_big(seen, label, n, value_at):
    """Lines 'sum=S at=i:v,...' of an n-element array whose element i is value_at(i)."""
    total = sum(value_at(i) for i in range(n))
    for rank in range(WORKERS):
        m = re.fullmatch(r"sum=([-0-9.e+]+) at=(.*)", seen[rank][label])
        assert m, seen[rank][label]
        assert float(m.group(1)) == total, (rank, label, float(m.group(1)), total)
        for item in m.group(2).split(","):
            i, v = item.split(":")
            assert float(v) == value_at(int(i)), (rank, label, i, v)


def test_sync_sums_big_keys_fp16_row_sparse_local_update_and_bad_input(launch, tandem_bin_dir):
    check_sync_scenario(*run(launch, tandem_bin_dir, "sync"))


# Each process announces its own loopback address, so that the job looks like
# one worker per host: servers 0 and 1 beside workers 0 and 1, server 2 on a
# host of its own (a spare server), the scheduler on 127.0.0.1.
ANNOUNCE_HOSTS = (
    'case "$DMLC_ROLE" in '
    'worker) export DMLC_NODE_HOST=127.0.0.$((DMLC_WORKER_ID + 1)) ;; '
    'server) export DMLC_NODE_HOST=127.0.0.$((DMLC_SERVER_ID == 2 ? 9 : DMLC_SERVER_ID + 1)) ;; '
    '*) export DMLC_NODE_HOST=127.0.0.1 ;; esac; exec "$@"')


def test_balanced_placement_cuts_keys_by_host_and_sums_stay_exact(launch, tandem_bin_dir):
    """TANDEM_KV_PLACEMENT=balanced with 4 workers, 2 servers beside workers
    and 1 spare: BytePS's split gives 0.3, 0.3, 0.4 (docs/kvstore.md), every
    worker cuts the big keys so, and the sums are those of the equal cut."""
    output, seen = run(launch, tandem_bin_dir, "sync", servers=3,
                       env={"TANDEM_KV_PLACEMENT": "balanced", "PS_VERBOSE": "1"},
                       wrap=lambda argv: ["sh", "-c", ANNOUNCE_HOSTS, "sh", *argv],
                       extra_args=["--command-runs-all-roles"], timeout=120)
    check_sync_scenario(output, seen)
    for rank in range(WORKERS):
        assert re.search(rf"^\[worker {rank}\] .*balanced key placement: server shares "
                         r"0\.3, 0\.3, 0\.4$", output, re.M), output


def test_unknown_placement_is_refused_naming_the_variable(launch, tandem_bin_dir):
    result = launch(WORKERS, SERVERS, [str(tandem_bin_dir / "kvstore_check"), "--scenario",
                                       "sync"], env={"TANDEM_KV_PLACEMENT": "bytePS"}, timeout=60)
    assert result.returncode != 0
    assert "TANDEM_KV_PLACEMENT is 'bytePS' (expected mxnet or balanced)" in result.output, \
        result.output


@pytest.mark.parametrize("drop,seed", [(2, 11), (5, 12)])
def test_sync_results_stay_exact_when_messages_are_dropped(launch, tandem_bin_dir, drop, seed):
    """PS_RESEND=1 with PS_DROP_MSG: every process discards that percentage of
    the data messages and acks it receives; resends make up for them."""
    env = {"PS_RESEND": "1", "PS_RESEND_TIMEOUT": "100", "PS_DROP_MSG": str(drop),
           "TANDEM_DROP_SEED": str(seed), "PS_VERBOSE": "1"}  # 1: the resend summaries
    output, seen = run(launch, tandem_bin_dir, "sync", env=env, timeout=240)
    check_sync_scenario(output, seen)
    resent = [int(n) for n in re.findall(r"reliable delivery: \d+ messages sent, (\d+) resent",
                                         output)]
    assert resent and sum(resent) > 0, "no message was resent: the drops did not happen"


def check_sync_scenario(output, seen):
    """The numbers of kvstore_check's "sync" scenario, in closed form."""
    check_all(seen, "k0 init", range(20))
    for r in (1, 2, 3):
        check_all(seen, f"k0 round{r}", [TRI * (i % 7 + r) for i in range(20)])
    # 1000003 elements: above MXNET_KVSTORE_BIGARRAY_BOUND, split across both servers.
    check_big(seen, "k1 big", 1000003, lambda i: TRI * (i % 13))
    check_all(seen, "k2 fp16", [TRI * (i % 5) + 0.5 * WORKERS for i in range(33)])
    rows = [0, 1, 999, 1000, 1999]
    check_big(seen, "k3 rows", 5 * 600, lambda p: TRI * rows[p // 600])
    # Row-sparse push: worker r pushes rows {r, 1500} of value r + 1; without
    # an optimizer the value becomes the round's sum (0 on rows nobody pushed).
    pushed = {0: 1, 3: 4, 4: 0, 1500: TRI, 1999: 0}
    order = [0, 3, 4, 1500, 1999]
    check_big(seen, "k3 pushed-rows", 5 * 600, lambda p: pushed[order[p // 600]])
    # update_on_kvstore=false: two rounds of w -= 0.5 * (sum of the gradients).
    check_all(seen, "k4 local-update", [i - 2 * 0.5 * TRI * (i % 3) for i in range(10)])
    check_all(seen, "k5 devices", [sum(r + i + 1 for r in range(WORKERS)) for i in range(8)])
    for case in ("unknown-key", "pull-unknown-key", "dtype", "shape", "pull-size", "double-init",
                 "mixed-keys"):
        for rank in range(WORKERS):
            assert f"[worker {rank}] kvstore_check: bad {case} ok" in output, (rank, case)
    check_all(seen, "k6 after-bad", [sum(r * i for r in range(WORKERS)) for i in range(6)])


def sgd_momentum(w, g, steps, lr=0.5, momentum=0.5):
    """MXNet's SGD with momentum (wd 0, rescale 1), float32:
    mom = momentum * mom - lr * g; w += mom. Returns [(w, mom)] per step."""
    mom = 0.0
    out = []
    for _ in range(steps):
        mom = f32(f32(momentum * mom) - f32(lr * g))
        w = f32(w + mom)
        out.append((w, mom))
    return out


def test_sync_with_optimizer_fp16_multi_precision_and_saved_states(launch, tandem_bin_dir,
                                                                  tmp_path):
    _, seen = run(launch, tandem_bin_dir, "optimizer", tmp_path)
    for label, scale in (("opt round", 1.0), ("opt fp16 round", 0.25)):
        per_element = [sgd_momentum(float(i), TRI * (i % 3 + 1) * scale, 4) for i in range(12)]
        for r in range(4):
            check_all(seen, f"{label}{r + 1}", [p[r][0] for p in per_element])
        # Round 5 runs after loading the states saved after round 3: the
        # momentum of round 3 again (and, for the float16 key, its float32
        # master weight, so the result repeats round 4).
        expected = []
        for i, p in enumerate(per_element):
            w3, mom3 = p[2]
            mom5 = f32(f32(0.5 * mom3) - f32(0.5 * TRI * (i % 3 + 1) * scale))
            expected.append(f32((w3 if "fp16" in label else p[3][0]) + mom5))
        check_all(seen, f"{label}5", expected)
    # Each server wrote its own shard.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["states.server0", "states.server1"]


def test_async_applies_every_push(launch, tandem_bin_dir):
    output, seen = run(launch, tandem_bin_dir, "async")
    assert "[worker 0] kvstore_check: bad async-without-optimizer ok" in output
    check_all(seen, "async final", [100 + i - 0.5 * WORKERS * 10 for i in range(16)])


def quantise(two_bit: bool, grad: float, residual: float, t: float = 0.5):
    """Reference of MXNet's quantisers (docs/gradient-compression.md) on one
    float32 value: returns (value the server receives, new residual)."""
    r = f32(residual + grad)
    if two_bit:
        sent = t if r >= t else (-t if r <= -t else 0.0)
    else:
        sent = 1.0 if r > t else -1.0
    return sent, f32(r - sent)


@pytest.mark.parametrize("kind", ["2bit", "1bit"])
def test_compressed_pushes_match_a_reference_quantiser(launch, tandem_bin_dir, kind):
    _, seen = run(launch, tandem_bin_dir, "compress2" if kind == "2bit" else "compress1")
    pattern = [0.6, -0.9, 0.2, 0.0, 0.3, -0.2, 1.7, -0.25]
    # Gradients repeat every 8 elements, so every value depends on i % 8 only.
    residual = [[0.0] * 8 for _ in range(WORKERS)]
    for r in range(3):
        total = [0.0] * 8
        for rank in range(WORKERS):
            for c in range(8):
                g = f32(f32(pattern[c] * (rank + 1)) + 0.125 * r)
                sent, residual[rank][c] = quantise(kind == "2bit", g, residual[rank][c])
                total[c] = f32(total[c] + sent)
        check_all(seen, f"cmp round{r}", [total[i % 8] for i in range(40)])
        check_big(seen, f"cmp big round{r}", 1000010, lambda i, t=total: t[i % 8])
