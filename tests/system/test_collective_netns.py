"""Collectives across the hosts of a network-namespace bed (netbed.py) with
two ranks on each host, started under the torchrun contract (RANK,
LOCAL_RANK, MASTER_ADDR=h1) the way torchrun on each host would start
them: the hierarchical allreduce's stages on each host (by the same-host
copy between the ranks of one namespace, TANDEM_COLLECTIVE_SAME_HOST_COPY=
host) and across hosts (over the bridge) give exact results, and a rank
killed with SIGKILL is named by every survivor (docs/collectives.md,
"Hierarchical")."""

from __future__ import annotations

import re
import secrets
import subprocess

OK = re.compile(r"collective_check: ok rank=(\d+) size=(\d+) checks=(\d+)")
LAYOUT = ("communicator of 4 worker(s) across hosts: the selection table's TCP rows, "
          "256 KiB segments, 2 host(s) with 2 rank(s) each")


def run_ranks(bed, argv: list[str], per_host: int, extra: dict[str, str],
              timeout: float) -> list[tuple[int, int, str]]:
    """Starts per_host ranks on every host of `bed`; returns (rank, exit code,
    output) of each once all ended (the bed's fixture kills what is left)."""
    secret = secrets.token_hex(16)
    world = len(bed.hosts) * per_host
    procs = []
    for h in bed.hosts:
        for local in range(per_host):
            rank = (h.index - 1) * per_host + local
            env = {"PATH": "/usr/bin:/bin", "TANDEM_SECRET": secret, "RANK": str(rank),
                   "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                   "LOCAL_WORLD_SIZE": str(per_host), "MASTER_ADDR": bed.host(1).name,
                   "MASTER_PORT": "29511", "TANDEM_COLLECTIVE_SAME_HOST_COPY": "host",
                   "PS_VERBOSE": "1", **extra}
            procs.append((rank, bed.popen(h, argv, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)))
    results = []
    for rank, p in procs:
        try:
            out = p.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0] + "\n(killed by the test: timed out)"
        results.append((rank, p.returncode, out))
    return results


def report(results) -> str:
    return "\n".join(f"--- rank {r} (exit {rc}):\n{out}" for r, rc, out in results)


def test_exact_results_on_two_hosts_of_two_ranks(netbed, tandem_bin_dir):
    bed = netbed(2)
    results = run_ranks(bed, [str(tandem_bin_dir / "collective_check")], 2, {}, 240)
    text = report(results)
    checks = set()
    for rank, rc, out in results:
        assert rc == 0, text
        m = OK.search(out)
        assert m and int(m.group(1)) == rank and m.group(2) == "4", text
        checks.add(m.group(3))
        # The copy reaches the host-mate only; every rank sees 2 hosts of 2.
        assert "same-host copy with 1 of 3 peers" in out, text
        assert LAYOUT in out, text
    assert len(checks) == 1 and int(checks.pop()) > 200, text


def test_kill_9_is_named_by_every_survivor(netbed, tandem_bin_dir):
    """256 KiB allreduces: the hierarchical allreduce (from 64 KiB among 2
    hosts of 2). Rank 3 dies; its host-mate and the ranks of the other host
    raise PeerLost naming it."""
    bed = netbed(2)
    victim = 3
    results = run_ranks(bed, [str(tandem_bin_dir / "collective_check"), "--die-rank",
                              str(victim)], 2, {"TANDEM_COLLECTIVE_TIMEOUT": "30"}, 90)
    text = report(results)
    for rank, rc, out in results:
        if rank == victim:
            assert rc == -9 and f"rank {victim} dies now" in out, text
            continue
        assert rc == 3, text
        assert re.search(r"collective_check: PeerLost: .*'(after|before)-death'.*"
                         rf"lost worker (rank )?{victim} \(", out), text
