"""A worker of tests/system/test_elastic_kvstore.py: dist_sync rounds on a
small key and on a key split across the servers, in an elastic job
(tandem launch --workers MIN:MAX, docs/elastic.md).

    elastic_rounds_worker.py --rounds N [--leave RANK:ROUND ...] [--freeze RANK:ROUND]
                             [--hold RANK:ROUND:PATH]

In round r worker w pushes (w+1)*r at every element of both keys; without an
optimizer the pulled value is r times the sum of (w+1) over the workers in
that round. A worker named by --leave RANK:ROUND kills itself (SIGKILL) just
before pushing that round, so from that round on the others' rounds hold
exactly the workers that remain; each checks every pulled value against
that closed form and prints 'elastic: round R rank K value V members M'.
At the end each survivor prints 'elastic: done rank K workers [..] epoch E'.

A worker named by --freeze RANK:ROUND prints 'elastic: rank K pid P
freezes before round R' and stops itself (SIGSTOP) there instead: alive,
its connections open, silent, until the scheduler's heartbeat timeout makes
the job go on without it. Once continued (SIGCONT) it tries its push of that
round, which fails (its job went on without it), and it exits non-zero.
--hold RANK:ROUND:PATH does the same without stopping: the worker prints
'elastic: rank K holds before round R' and waits (at most 300 s) until PATH
exists (a test cuts its link meanwhile), then tries its push."""

from __future__ import annotations

import argparse
import os
import signal
import time

import numpy as np

import tandem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--leave", action="append", default=[], metavar="RANK:ROUND")
    parser.add_argument("--freeze", metavar="RANK:ROUND")
    parser.add_argument("--hold", metavar="RANK:ROUND:PATH")
    args = parser.parse_args()
    leave = {int(r): int(n) for r, n in (item.split(":") for item in args.leave)}
    frozen = {}
    if args.freeze:
        rank_text, round_text = args.freeze.split(":")
        frozen[int(rank_text)] = int(round_text)
    held, hold_path = {}, None
    if args.hold:
        rank_text, round_text, hold_path = args.hold.split(":", 2)
        held[int(rank_text)] = int(round_text)
    gone = {**leave, **frozen, **held}  # from that round on, not in the rounds
    kv = tandem.kvstore.create("dist_sync")
    rank, started = kv.rank, kv.num_workers
    small = np.zeros(10, dtype=np.float32)
    big = np.zeros(1000, dtype=np.float32)  # over MXNET_KVSTORE_BIGARRAY_BOUND: split
    kv.init(0, small)
    kv.init(1, big)
    for r in range(1, args.rounds + 1):
        if leave.get(rank) == r:
            print(f"elastic: rank {rank} leaves before round {r}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if frozen.get(rank) == r:
            print(f"elastic: rank {rank} pid {os.getpid()} freezes before round {r}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            print(f"elastic: rank {rank} continued; pushing round {r}", flush=True)
            kv.push(0, np.full(10, (rank + 1) * r, dtype=np.float32))
            raise AssertionError("the push of a worker the job went on without was taken")
        if held.get(rank) == r:
            print(f"elastic: rank {rank} holds before round {r}", flush=True)
            deadline = time.monotonic() + 300
            while not os.path.exists(hold_path):
                assert time.monotonic() < deadline, f"{hold_path} never appeared"
                time.sleep(0.05)
            print(f"elastic: rank {rank} released; pushing round {r}", flush=True)
            kv.push(0, np.full(10, (rank + 1) * r, dtype=np.float32))
            raise AssertionError("the push of a worker the job went on without was taken")
        members = [w for w in range(started) if gone.get(w, args.rounds + 1) > r]
        expected = r * sum(w + 1 for w in members)
        kv.push(0, np.full(10, (rank + 1) * r, dtype=np.float32))
        kv.push(1, np.full(1000, (rank + 1) * r, dtype=np.float32))
        kv.pull(0, out=small)
        kv.pull(1, out=big)
        assert np.all(small == expected), (r, small[:3], expected, members)
        assert np.all(big == expected), (r, big[:3], expected, members)
        print(f"elastic: round {r} rank {rank} value {expected:g} members {len(members)}",
              flush=True)
        time.sleep(0.02)
    # Every change has reached every member by now, and the barrier says
    # which members it was released with: the same as the store's view.
    epoch, members = kv.barrier()
    assert (epoch, members) == (kv.epoch, kv.workers), (epoch, members, kv.epoch, kv.workers)
    print(f"elastic: done rank {rank} workers {kv.workers} epoch {kv.epoch} "
          f"num_workers {kv.num_workers}", flush=True)
    kv.close()


if __name__ == "__main__":
    main()
