"""A worker of tests/system/test_python_collectives.py: every collective of
tandem (allreduce with each reduction, scaling and algorithm, broadcast,
allgather with equal and unequal rows, reduce_scatter, alltoall, barrier, a
group) through the bindings on NumPy arrays or torch tensors of several
dtypes and sizes, each result checked in closed form here; then bad calls
raise tandem.InvalidArgument with the C++ message, and a last allreduce is
exact.

    collective_worker.py --kind numpy|torch
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import tandem
from checks import Checker

FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.int32, np.int64]


def run(c: Checker) -> None:
    r, n = tandem.rank(), tandem.size()
    tri = n * (n + 1) // 2
    dtypes = FLOATS + INTS + (["bfloat16"] if c.kind == "torch" else [])
    for dt in dtypes:
        for count in (1, 7, 1000, 33000):
            i = np.arange(count)
            k = (i % 5 + 1)

            def make(values):
                if dt == "bfloat16":
                    return c.torch.from_numpy(np.asarray(values, np.float32)).to(
                        c.torch.bfloat16)
                return c.tensor(np.asarray(values).astype(dt))

            x = make((r + 1) * k)
            tag = f"{dt if isinstance(dt, str) else dt.__name__}[{count}]"
            c.equal(f"sum {tag}", tandem.allreduce(x), tri * k)
            c.equal(f"input untouched {tag}", x, (r + 1) * k)
            c.equal(f"min {tag}", tandem.allreduce(x, op="min"), k)
            c.equal(f"max {tag}", tandem.allreduce(x, op="max"), n * k)
            # Products kept small enough to be exact in every dtype (bfloat16: 8 bits).
            k2 = i % 2 + 1
            c.equal(f"prod {tag}", tandem.allreduce(make((r + 1) * k2), op="prod"),
                    math.factorial(n) * k2 ** n)
            is_int = dt in INTS
            avg = (tri * k) // n if is_int else tri * k / n
            c.equal(f"avg {tag}", tandem.allreduce(x, op="avg"), avg)
            if not is_int:
                c.equal(f"scaled {tag}", tandem.allreduce(x, prescale=0.5, postscale=4.0),
                        2 * tri * k)
                for alg in ("ring", "halving_doubling", "direct", "recursive_doubling",
                            "hierarchical"):
                    c.equal(f"sum {alg} {tag}", tandem.allreduce(x, algorithm=alg), tri * k)
            y = make((r + 1) * k)
            h = tandem.allreduce_async_(y, name=f"inplace {tag}")
            c.equal(f"in place async {tag}", h.wait(), tri * k)
            c.equal(f"in place is the input {tag}", y, tri * k)
            # broadcast from the last rank, in place and into a copy.
            b = make(k * (r + 10))
            c.equal(f"broadcast copy {tag}", tandem.broadcast(b, n - 1), k * (n - 1 + 10))
            c.equal(f"broadcast leaves input {tag}", b, k * (r + 10))
            tandem.broadcast_(b, n - 1)
            c.equal(f"broadcast_ {tag}", b, k * (n - 1 + 10))
            # reduce_scatter over n blocks of `count` elements.
            big = np.arange(n * count)
            rs = tandem.reduce_scatter(make((r + 1) * (big % 7)))
            c.equal(f"reduce_scatter {tag}", rs, tri * (big[r * count:(r + 1) * count] % 7))
        # 2-d allgather: equal rows, then rank r with r + 1 rows (allgatherv).
        eq = c.tensor(np.full((2, 3), 10 * r, np.float64).astype(dt if not isinstance(dt, str)
                                                                 else np.float32))
        if dt == "bfloat16":
            eq = eq.to(c.torch.bfloat16)
        c.equal(f"allgather {dt}", tandem.allgather(eq),
                np.repeat(10 * np.arange(n), 2)[:, None] * np.ones((1, 3)))
        un = c.tensor(np.full((r + 1, 2), r, np.float64).astype(dt if not isinstance(dt, str)
                                                                else np.float32))
        if dt == "bfloat16":
            un = un.to(c.torch.bfloat16)
        c.equal(f"allgatherv {dt}", tandem.allgather(un),
                np.concatenate([np.full((q + 1, 2), q) for q in range(n)]))
        # alltoall: block j (two elements) of rank r is 10 r + j; out block q is 10 q + r.
        a2a = c.tensor(np.repeat(10 * r + np.arange(n), 2).astype(
            dt if not isinstance(dt, str) else np.float32))
        if dt == "bfloat16":
            a2a = a2a.to(c.torch.bfloat16)
        c.equal(f"alltoall {dt}", tandem.alltoall(a2a), np.repeat(10 * np.arange(n) + r, 2))
    # 0-d allgather, barrier.
    c.equal("allgather scalar", tandem.allgather(c.tensor(np.array(r + 0.5))),
            np.arange(n) + 0.5)
    tandem.barrier()
    # Two groups: the even ranks and the odd ones (each rank is in one).
    mates = list(range(r % 2, n, 2))
    g = tandem.new_group(mates)
    c.equal("group rank", np.array(tandem.rank(g)), np.array(mates.index(r)))
    c.equal("group sum", tandem.allreduce(c.tensor(np.full(4, r + 1.0)), group=g),
            np.full(4, sum(q + 1.0 for q in mates)))

    # Bad calls: the mapped class with the C++ (or binding) message; nothing breaks.
    f = c.tensor(np.ones(6, np.float32))
    c.raises("size mismatch", tandem.InvalidArgument,
             "output is 5 x float32, expected the input's 6 x float32",
             lambda: tandem.allreduce(f, out=c.tensor(np.ones(5, np.float32))))
    c.raises("dtype mismatch", tandem.InvalidArgument, "float64",
             lambda: tandem.allreduce(f, out=c.tensor(np.ones(6, np.float64))))
    c.raises("scaled ints", tandem.InvalidArgument, "int32",
             lambda: tandem.allreduce(c.tensor(np.ones(4, np.int32)), prescale=2.0))
    c.raises("unknown op", tandem.InvalidArgument, "unknown reduction 'mean'",
             lambda: tandem.allreduce(f, op="mean"))
    c.raises("indivisible", tandem.InvalidArgument, f"split into {n} equal blocks",
             lambda: tandem.reduce_scatter(c.tensor(np.ones(n * 3 + 1, np.float32))))
    c.raises("bad root", tandem.InvalidArgument, "root",
             lambda: tandem.broadcast_(f, n + 3))
    c.raises("not a tensor", tandem.InvalidArgument, "neither a torch tensor nor a buffer",
             lambda: tandem.allreduce([1.0, 2.0], out=f))
    c.equal("after bad calls", tandem.allreduce(c.tensor(np.full(6, r, np.float32))),
            np.full(6, n * (n - 1) / 2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["numpy", "torch"], required=True)
    args = ap.parse_args()
    c = Checker(args.kind, "collective_worker")
    tandem.init()
    run(c)
    c.done(tandem.rank(), tandem.size())
    tandem.shutdown()


if __name__ == "__main__":
    main()
