"""A worker of tests/system/test_job_stop.py: pushes and pulls one key in
dist_sync rounds until the job fails, with no handler of its own, so that
what ends it is tandem's exit hook (tandem/_exit.py).

    peer_loss_worker.py --rounds N [--raise-at R] [--wait-for PATH]

Each worker prints 'peer_loss: round R rank K value V' after its pull of
round R; V is the closed form of the sum of every worker's pushes. With
--raise-at R, rank 0 raises a ValueError of its own after round R. With
--wait-for PATH, every worker first waits (at most 120 s) until PATH exists."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import tandem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--wait-for", type=Path)
    args = parser.parse_args()
    kv = tandem.kvstore.create("dist_sync")
    if args.wait_for is not None:
        print(f"peer_loss: rank {kv.rank} waiting for {args.wait_for}", flush=True)
        deadline = time.monotonic() + 120
        while not args.wait_for.exists():
            assert time.monotonic() < deadline, f"{args.wait_for} never appeared"
            time.sleep(0.05)
    rank, n = kv.rank, kv.num_workers
    w = np.zeros(4, dtype=np.float32)
    kv.init(0, w)
    for r in range(1, args.rounds + 1):
        kv.push(0, np.full(4, rank + r, dtype=np.float32))
        kv.pull(0, out=w)
        # Without an optimizer the value is the round's sum of pushes.
        expected = sum(k + r for k in range(n))
        assert float(w[0]) == expected, (r, float(w[0]), expected)
        print(f"peer_loss: round {r} rank {rank} value {float(w[0]):g}", flush=True)
        if rank == 0 and r == args.raise_at:
            raise ValueError(f"rank 0 gives up after round {r}")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
