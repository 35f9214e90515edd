"""A worker of tests/system/test_elastic_collectives.py: allreduce rounds of
tandem's collectives in an elastic job (tandem launch --workers MIN:MAX,
docs/elastic.md "Elastic collectives").

    elastic_allreduce_worker.py --rounds N [--leave RANK:ROUND ...] [--elements E]
                                [--hold RANK:ROUND:PATH]

In round r worker w contributes (w+1)*(i % 97) + r at element i (float32),
so a round's sum is the closed form of exactly the members it ran over. A
worker named by --leave RANK:ROUND kills itself (SIGKILL) just before that
round's allreduce. The others' allreduce then raises
tandem.MembershipChanged; each calls tandem.regroup(), the survivors agree
on the round to go on from (the lowest one a member has not completed:
an allreduce under way when a worker left may have completed on some and
not on others) and go on in the new world. Each completed round is checked
and printed as 'elastic: round R rank K size S sum-ok'; each change as
'elastic: regrouped rank K epoch E workers [..] size S resume R in T ms'
(T: from the exception to the agreed round, through regroup()); the end as
'elastic: done worker W rank K size S epoch E'.

A worker named by --hold RANK:ROUND:PATH prints 'elastic: worker W holds
before round R' there and waits (at most 300 s) until PATH exists (a test
cuts its host's link meanwhile, and the job goes on without it), then tries
that round's allreduce, which fails: it is not a member any more."""

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
    parser.add_argument("--elements", type=int, default=100000)
    parser.add_argument("--hold", metavar="RANK:ROUND:PATH")
    args = parser.parse_args()
    hold = None
    if args.hold:
        rank_text, round_text, path = args.hold.split(":", 2)
        hold = (int(rank_text), int(round_text), path)
    leave = {int(r): int(n) for r, n in (item.split(":") for item in args.leave)}

    tandem.init()
    worker = tandem.rank()  # the worker rank: the world's rank before any change
    members = list(range(tandem.size()))
    index = np.arange(args.elements) % 97
    epoch = 0
    r = 1
    while r <= args.rounds:
        if leave.get(worker) == r:
            print(f"elastic: worker {worker} leaves before round {r}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if hold is not None and hold[0] == worker and hold[1] == r:
            print(f"elastic: worker {worker} holds before round {r}", flush=True)
            deadline = time.monotonic() + 300
            while not os.path.exists(hold[2]) and time.monotonic() < deadline:
                time.sleep(0.1)
            hold = None
        x = ((worker + 1) * index + r).astype(np.float32)
        try:
            tandem.allreduce_(x, name="round")
        except tandem.MembershipChanged as e:
            assert "left the job" in str(e), str(e)
            raised = time.monotonic()
            epoch, members = tandem.regroup()
            resume = np.array([r], dtype=np.int64)
            tandem.allreduce_(resume, op=tandem.Min, name="resume")
            r = int(resume[0])
            print(f"elastic: regrouped rank {tandem.rank()} epoch {epoch} workers {members} "
                  f"size {tandem.size()} resume {r} in {(time.monotonic() - raised) * 1e3:.1f} ms",
                  flush=True)
            continue
        expected = sum((w + 1) * index + r for w in members).astype(np.float32)
        if not np.array_equal(x, expected):
            bad = int(np.flatnonzero(x != expected)[0])
            raise SystemExit(f"round {r} worker {worker}: element {bad} is {x[bad]}, expected "
                             f"{expected[bad]} over workers {members}")
        print(f"elastic: round {r} rank {tandem.rank()} size {tandem.size()} sum-ok", flush=True)
        r += 1
    print(f"elastic: done worker {worker} rank {tandem.rank()} size {tandem.size()} "
          f"epoch {epoch}", flush=True)
    tandem.shutdown()


if __name__ == "__main__":
    main()
