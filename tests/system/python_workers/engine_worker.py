"""A worker of tests/system/test_python_call_checks.py: the framework engine from
Python (tandem.engine()).

    engine_worker.py --mode order   rank 0 submits 'a' then 'b', the others
                                    'b' then 'a': both reduce, exactly
    engine_worker.py --mode stall   rank 0 also submits 'c', which no other
                                    rank does: the stall is reported naming
                                    'c' and the missing ranks, then 'c' fails
Prints 'engine_worker: ok rank=R ...' or what went wrong.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import tandem


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["order", "stall"], required=True)
    args = parser.parse_args()
    tandem.init()
    rank, size = tandem.rank(), tandem.size()
    engine = tandem.engine()
    a = np.full(5, rank + 1, dtype=np.float32)
    b = np.full(3, 10 * (rank + 1), dtype=np.int64)
    names = [("a", a), ("b", b)] if rank == 0 else [("b", b), ("a", a)]
    handles = [engine.allreduce_async(t, t, "sum", name=n) for n, t in names]
    stalled = None
    if args.mode == "stall" and rank == 0:
        c = np.ones(2, dtype=np.float32)
        stalled = engine.allreduce_async(c, c, "sum", name="c")
    for h in handles:
        h.wait()
    total = size * (size + 1) // 2
    if not (a == total).all() or not (b == 10 * total).all():
        print(f"engine_worker: rank {rank}: wrong sums {a.tolist()} {b.tolist()}", flush=True)
        return 1
    if stalled is not None:
        try:
            stalled.wait()
            print("engine_worker: 'c' completed although only rank 0 submitted it", flush=True)
            return 1
        except tandem.Timeout as e:
            print(f"engine_worker: rank {rank}: 'c' failed: {e}", flush=True)
    # Every rank waits here until rank 0 is done with 'c' (so all have seen
    # the stall's report before they count it).
    tandem.barrier()
    stats = engine.stats()
    print(f"engine_worker: ok rank={rank} size={size} stalls_reported={stats['stalls_reported']}",
          flush=True)
    tandem.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
