"""A worker of tests/system/test_hybrid_node.py: one process uses the
parameter server and the collectives on one node, interleaved, every result
checked in closed form (the same rounds as tests/programs/hybrid_rounds.cc).

    hybrid_worker.py --first init|store --rounds N [--pause-ms M]

--first init: tandem.init() joins the job, then kvstore.create("dist_sync")
opens the store on the same node; --first store: the reverse. Each closes in
the reverse order of opening. Each round r on W workers: an allreduce of
(rank + 1) * r runs while a push-pull of rank + r on key 0 gives
W(W-1)/2 + W r; the allreduce gives r W(W+1)/2; a broadcast from rank r % W
of r + rank gives r + r % W. Prints 'hybrid: rank=R round=N ok' per round
and 'hybrid: ok kind=<first> rank=R size=W checks=C' at the end."""

from __future__ import annotations

import argparse
import time

import numpy as np

import tandem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first", choices=["init", "store"], required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--pause-ms", type=int, default=0)
    args = parser.parse_args()
    if args.first == "init":
        tandem.init()
        kv = tandem.kvstore.create("dist_sync")
    else:
        kv = tandem.kvstore.create("dist_sync")
        tandem.init()
    rank, w = tandem.rank(), tandem.size()
    assert (kv.rank, kv.num_workers) == (rank, w), (kv.rank, kv.num_workers, rank, w)
    kv.init(0, np.zeros(8, dtype=np.float32))
    checks = 0
    for r in range(1, args.rounds + 1):
        mine = np.full(8, (rank + 1) * r, dtype=np.float32)
        reduce = tandem.allreduce_async(mine)
        pulled = np.zeros(8, dtype=np.float32)
        kv.pushpull(0, np.full(8, rank + r, dtype=np.float32), out=pulled)
        assert pulled.tolist() == [w * (w - 1) // 2 + w * r] * 8, (r, pulled.tolist())
        reduced = reduce.wait()
        assert reduced.tolist() == [r * w * (w + 1) // 2] * 8, (r, reduced.tolist())
        root = r % w
        shared = np.full(8, r + rank, dtype=np.float32)
        tandem.broadcast_(shared, root)
        assert shared.tolist() == [r + root] * 8, (r, shared.tolist())
        checks += 3
        print(f"hybrid: rank={rank} round={r} ok", flush=True)
        time.sleep(args.pause_ms / 1000)
    if args.first == "init":
        kv.close()
        tandem.shutdown()
    else:
        tandem.shutdown()
        kv.close()
    print(f"hybrid: ok kind={args.first} rank={rank} size={w} checks={checks}", flush=True)


if __name__ == "__main__":
    main()
