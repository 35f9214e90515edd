"""A worker of tests/system/test_job_stop.py: pushes and pulls one key in
dist_sync rounds until the job fails, with no handler of its own, so that
what ends it is tandem's exit hook (tandem/_exit.py).

    peer_loss_worker.py --rounds N [--raise-at R]

Each worker prints 'peer_loss: round R rank K value V' after its pull of
round R; V is the closed form of the sum of every worker's pushes. With
--raise-at R, rank 0 raises a ValueError of its own after round R."""

from __future__ import annotations

import argparse
import time

import numpy as np

import tandem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--raise-at", type=int, default=-1)
    args = parser.parse_args()
    kv = tandem.kvstore.create("dist_sync")
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
