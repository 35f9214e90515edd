"""PS_RESEND=1 through `tandem launch`: with received messages dropped on
purpose (PS_DROP_MSG), every cluster message (register, node table, barriers,
heartbeats) still arrives through the reliable transport, and the job forms,
passes its barriers and exits 0. docs/protocol-resend.md."""

from __future__ import annotations

import re

import pytest

from test_cluster_launch import barriers_for, check_ranks, done_lines

SUMMARY = re.compile(r"\[(scheduler|server \d+|worker \d+)\] .*reliable delivery: (\d+) messages "
                     r"sent, (\d+) resent, (\d+) acks sent, (\d+) received copies dropped "
                     r"\(PS_DROP_MSG\), (\d+) duplicates discarded, (\d+) delivered")


@pytest.mark.parametrize("drop,seed", [(5, 1), (5, 2), (20, 3)])
def test_job_forms_and_passes_barriers_while_messages_are_dropped(launch, tandem_bin_dir, drop,
                                                                 seed):
    env = {"PS_RESEND": "1", "PS_DROP_MSG": str(drop), "TANDEM_DROP_SEED": str(seed),
           "PS_RESEND_TIMEOUT": "100", "PS_VERBOSE": "1", "PS_HEARTBEAT_INTERVAL": "0.2"}
    result = launch(4, 2, [tandem_bin_dir / "cluster_check", "--barriers", "30"], env=env,
                    extra_args=["--command-runs-all-roles"], timeout=150)
    assert result.returncode == 0, result.job.describe()
    counts = {r: barriers_for(r, 30) for r in ("scheduler", "server", "worker")}
    check_ranks(result.output, servers=2, workers=4, barriers_per_role=counts)
    assert len(done_lines(result.output)) == 7

    # Every process ran its messages through the reliable layer and lost some.
    summaries = [m.groups() for m in SUMMARY.finditer(result.output)]
    assert sorted(s[0] for s in summaries) == sorted(
        ["scheduler"] + [f"server {i}" for i in range(2)] + [f"worker {i}" for i in range(4)]), \
        summaries
    sent = sum(int(s[1]) for s in summaries)
    resent = sum(int(s[2]) for s in summaries)
    dropped = sum(int(s[4]) for s in summaries)
    delivered = sum(int(s[6]) for s in summaries)
    assert sent > 7 * 30, summaries  # at least the barriers' requests and releases
    assert dropped > 0 and resent > 0, summaries
    # Every message sent was delivered exactly once, job-wide, except those
    # still in flight when a process shut down (its final messages).
    assert delivered <= sent, summaries
    assert "PS_DROP_MSG" in result.output
