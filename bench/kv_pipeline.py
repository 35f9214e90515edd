#!/usr/bin/python3
"""One data-parallel step's parameter-server traffic without the training:
every worker pushes and pulls TOTAL bytes of float32 in PARTS keys
(pushpull_async, priority -key, all issued at once, then waited for) for
ROUNDS rounds after a barrier each; worker 0 prints each round's time, and
every worker its host's TCP segments sent and retransmitted
(/proc/net/snmp of its network namespace). For the bed
(docs/benchmarks.md, "Servers on spare hosts on the bed"):

  bench/netbed_run.py --hosts 8 --rate 100mbit --job 4,8 --layout beside-workers \\
      --env TANDEM_KV_PLACEMENT=balanced --env MXNET_KVSTORE_BIGARRAY_BOUND=32768 -- \\
      sh -c 'case "$DMLC_ROLE" in worker) exec /usr/bin/python3 bench/kv_pipeline.py ;; \\
             *) exec build/bin/tandem "$DMLC_ROLE" ;; esac'

Every process of the job runs the command; the scheduler and the servers
become tandem's own. Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build" / "python"))

import torch  # noqa: E402

import tandem  # noqa: E402


def tcp_counters() -> dict[str, str]:
    rows = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()
            if line.startswith("Tcp:")]
    return dict(zip(rows[0][1:], rows[1][1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--total-bytes", type=int, default=23298088,
                        help="bytes per worker and round (default: ddp_train.py's mlp)")
    parser.add_argument("--parts", type=int, default=89, help="keys (default 89: 256 KiB each)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    kv = tandem.kvstore.create("dist_sync")
    per_key = args.total_bytes // 4 // args.parts
    tensors = [torch.ones(per_key) for _ in range(args.parts)]
    for key, t in enumerate(tensors):
        kv.init(key, t)
    before = tcp_counters()
    for r in range(args.rounds):
        kv.barrier()
        start = time.perf_counter()
        handles = []
        for key, t in enumerate(tensors):
            handles += kv.pushpull_async(key, t, out=t, priority=-key)
        for h in handles:
            h.wait()
        if kv.rank == 0:
            print(f"kv_pipeline: round {r} {1000 * (time.perf_counter() - start):.0f} ms",
                  flush=True)
    after = tcp_counters()
    sent = int(after["OutSegs"]) - int(before["OutSegs"])
    resent = int(after["RetransSegs"]) - int(before["RetransSegs"])
    print(f"kv_pipeline: worker {kv.rank} TCP segments sent {sent} retransmitted {resent}",
          flush=True)
    kv.close()


if __name__ == "__main__":
    main()
