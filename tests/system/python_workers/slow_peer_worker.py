"""A worker of tests/system/test_wait_reports.py: rank 1 is slow (it sleeps
--delay seconds before each step), so that rank 0 waits for it at each step
and, with TANDEM_WAIT_REPORT_SECONDS below the delay, logs what it waits for.

    slow_peer_worker.py --api kvstore|collectives --delay S

kvstore: joining (rank 0 waits for the node table), a dist_sync push and
pull of key 0 (rank 0's pull waits for rank 1's push), a barrier.
collectives: joining, an allreduce (rank 0 waits for rank 1's pieces).
Every result is checked in closed form; each rank ends with
'slow_peer: ok kind=<api> rank=R size=N checks=C'."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tandem


def pause(rank: int, delay: float, step: str) -> None:
    if rank == 1:
        print(f"slow_peer: rank 1 sleeps {delay} s before {step}", flush=True)
        time.sleep(delay)


def kvstore_steps(rank: int, delay: float) -> tuple[int, int, int]:
    pause(rank, delay, "joining")
    kv = tandem.kvstore.create("dist_sync")
    kv.init(0, np.zeros(4, dtype=np.float32))
    pause(rank, delay, "pushing")
    kv.push(0, np.full(4, kv.rank + 1, dtype=np.float32))
    out = np.zeros(4, dtype=np.float32)
    kv.pull(0, out=out)
    expected = sum(k + 1 for k in range(kv.num_workers))
    assert out.tolist() == [expected] * 4, (out.tolist(), expected)
    pause(rank, delay, "the barrier")
    kv.barrier()
    result = kv.rank, kv.num_workers, 1
    kv.close()
    return result


def collective_steps(rank: int, delay: float) -> tuple[int, int, int]:
    pause(rank, delay, "joining")
    tandem.init()
    pause(rank, delay, "the allreduce")
    x = np.full(4, tandem.rank() + 1, dtype=np.float32)
    tandem.allreduce_(x)
    expected = sum(k + 1 for k in range(tandem.size()))
    assert x.tolist() == [expected] * 4, (x.tolist(), expected)
    result = tandem.rank(), tandem.size(), 1
    tandem.shutdown()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=["kvstore", "collectives"], required=True)
    parser.add_argument("--delay", type=float, required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    steps = kvstore_steps if args.api == "kvstore" else collective_steps
    got_rank, size, checks = steps(rank, args.delay)
    print(f"slow_peer: ok kind={args.api} rank={got_rank} size={size} checks={checks}", flush=True)


if __name__ == "__main__":
    main()
