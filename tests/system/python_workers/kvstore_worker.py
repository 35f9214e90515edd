"""A worker of tests/system/test_python_kvstore.py: the scenarios of
tests/programs/kvstore_check.cc through tandem.kvstore, on NumPy arrays or
torch tensors, each value checked in closed form here.

    kvstore_worker.py --kind numpy|torch --scenario sync|optimizer|async [--dir D]
"""

from __future__ import annotations

import argparse
import struct

import numpy as np

import tandem
from checks import Checker


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def sync(kv, c: Checker) -> None:
    rank, n = kv.rank, kv.num_workers
    tri = n * (n + 1) // 2  # sum of (rank + 1)
    # The collectives open on the store's node: the same worker rank.
    tandem.init()
    c.equal("collectives on the store's node", np.array([tandem.rank(), tandem.size()]),
            np.array([rank, n]))
    c.raises("a second store", tandem.InvalidArgument, "opened a distributed store",
             lambda: tandem.kvstore.create("dist_sync"))
    i20 = np.arange(20)
    w = c.tensor(i20.astype(np.float32))
    kv.init(0, w)
    kv.pull(0, out=w)
    c.equal("k0 init", w, i20)
    for r in (1, 2, 3):
        kv.push(0, c.tensor(((rank + 1) * (i20 % 7 + r)).astype(np.float32)))
        kv.pull(0, out=w)
        c.equal(f"k0 round{r}", w, tri * (i20 % 7 + r))
    # Above MXNET_KVSTORE_BIGARRAY_BOUND: split across the servers; pushpull in place.
    big = np.arange(1000003)
    b = c.zeros(big.shape, np.float32)
    kv.init(1, b)
    g = c.tensor(((rank + 1) * (big % 13)).astype(np.float32))
    kv.pushpull(1, g, out=b)
    c.equal("k1 big", b, tri * (big % 13))
    kv.pushpull(1, g)  # out defaults to the value itself
    c.equal("k1 big in place", g, tri * (big % 13))
    # float16 and float64 keys.
    i33 = np.arange(33)
    h = c.zeros((33,), np.float16)
    kv.init(2, h)
    kv.push(2, c.tensor(((rank + 1) * (i33 % 5) + 0.5).astype(np.float16)))
    kv.pull(2, out=h)
    c.equal("k2 fp16", h, tri * (i33 % 5) + 0.5 * n)
    d = c.zeros((3, 4), np.float64)
    kv.init(7, d)
    kv.push(7, c.tensor(np.full((3, 4), 0.25 * (rank + 1))))
    kv.pull(7, out=d)
    c.equal("k7 fp64 2-d", d, np.full((3, 4), 0.25 * tri))
    # Row-sparse pull and push of a split 2-d key.
    rs = c.zeros((2000, 600), np.float32)
    kv.init(3, rs)
    kv.push(3, c.tensor(np.repeat((rank + 1) * np.arange(2000, dtype=np.float32)[:, None],
                                  600, axis=1)))
    rows = c.zeros((5, 600), np.float32)
    ids = [0, 1, 999, 1000, 1999]
    kv.row_sparse_pull(3, out=rows, row_ids=ids)
    c.equal("k3 rows", rows, np.repeat(tri * np.array(ids)[:, None], 600, axis=1))
    kv.row_sparse_push(3, c.tensor(np.full((2, 600), rank + 1, np.float32)), [rank, 1500])
    ids = [0, 3, 1500, 1999]
    pushed = {0: 1, 3: 4 if n >= 4 else 0, 1500: tri, 1999: 0}
    kv.row_sparse_pull(3, out=rows[:4] if c.kind == "numpy" else rows[:4], row_ids=ids)
    c.equal("k3 pushed rows", rows[:4],
            np.repeat(np.array([pushed[i] for i in ids])[:, None], 600, axis=1))
    # Two local devices (a list of values for one key), and a list of keys.
    i8 = np.arange(8)
    o = c.zeros((8,), np.float32)
    kv.init(5, o)
    kv.push(5, [c.tensor((rank + i8).astype(np.float32)), c.tensor(np.ones(8, np.float32))])
    kv.pull(5, out=[o])
    c.equal("k5 devices", o, sum(r + i8 + 1 for r in range(n)))
    a, bb = c.zeros((4,), np.int32), c.zeros((4,), np.int64)
    kv.init([8, 9], [a, bb])
    kv.push([8, 9], [c.tensor(np.full(4, rank + 1, np.int32)),
                     c.tensor(np.full(4, 10 * (rank + 1), np.int64))])
    kv.pull([8, 9], out=[a, bb])
    c.equal("k8 int32", a, np.full(4, tri))
    c.equal("k9 int64", bb, np.full(4, 10 * tri))
    # broadcast: every worker ends with worker 0's value.
    mine = c.tensor(np.full(5, 100.0 + rank, np.float32))
    got = c.zeros((5,), np.float32)
    kv.broadcast(10, mine, out=got)
    c.equal("k10 broadcast", got, np.full(5, 100.0))

    # Bad input fails that call only, with the C++ message; then a round is exact.
    i6 = np.arange(6)
    k6 = c.tensor(i6.astype(np.float32))
    kv.init(6, k6)
    c.raises("unknown-key", tandem.InvalidArgument, "never initialised", lambda: kv.push(99, k6))
    c.raises("pull-unknown-key", tandem.InvalidArgument, "never initialised",
             lambda: kv.pull(99, out=k6))
    c.raises("dtype", tandem.InvalidArgument, "expected dtype float32, got float64",
             lambda: kv.push(6, c.zeros((6,), np.float64)))
    c.raises("shape", tandem.InvalidArgument, "expected shape [6]",
             lambda: kv.push(6, c.zeros((7,), np.float32)))
    c.raises("pull-size", tandem.InvalidArgument, "got [7]",
             lambda: kv.pull(6, out=c.zeros((7,), np.float32)))
    c.raises("double-init", tandem.InvalidArgument, "double init", lambda: kv.init(6, k6))
    c.raises("mixed-keys", tandem.InvalidArgument, "mixing", lambda: kv.init("name", k6))
    c.raises("unsupported-dtype", tandem.InvalidArgument, "unsupported dtype",
             lambda: kv.push(6, c.zeros((6,), np.int16)))
    c.raises("not-contiguous", tandem.InvalidArgument, "not",
             lambda: kv.pull(6, out=c.zeros((12,), np.float32)[::2]))
    if c.kind == "numpy":
        ro = np.zeros(6, np.float32)
        ro.setflags(write=False)
        c.raises("read-only-out", tandem.InvalidArgument, "read-only",
                 lambda: kv.pull(6, out=ro))
    c.raises("bad-key-type", tandem.InvalidArgument, "keys are int or str",
             lambda: kv.push(1.5, k6))
    kv.push(6, c.tensor((rank * i6).astype(np.float32)))
    kv.pull(6, out=k6)
    c.equal("k6 after-bad", k6, sum(r * i6 for r in range(n)))


def sgd_momentum(w: float, g: float, steps: int, lr=0.5, momentum=0.5):
    mom, out = 0.0, []
    for _ in range(steps):
        mom = f32(f32(momentum * mom) - f32(lr * g))
        w = f32(w + mom)
        out.append((w, mom))
    return out


def optimizer(kv, c: Checker, directory: str) -> None:
    rank, n = kv.rank, kv.num_workers
    tri = n * (n + 1) // 2
    # Values that cannot train are refused on every worker before anything is
    # sent; the servers never see them, and the valid call below still works.
    for bad, needle in (({"momentum": 5}, "parameter 'momentum' is 5, must be in [0, 1)"),
                        ({"learning_rate": -1}, "parameter 'learning_rate' is -1, must be in"),
                        ({"learning_rate": 1e39}, "beyond float32's range"),
                        ({"wd": -1}, "parameter 'wd' is -1"),
                        ({"rescale_grad": 0}, "parameter 'rescale_grad' is 0, must be in (0,")):
        c.raises(f"set_optimizer {bad}", tandem.InvalidArgument, needle,
                 lambda bad=bad: kv.set_optimizer("sgd", **{
                     "learning_rate": 0.5, **bad}))
    for key in (2**63, -1, 2**31):
        c.raises(f"key {key}", tandem.InvalidArgument, f"key {key} is outside 0..2147483647",
                 lambda key=key: kv.init(key, np.zeros(2, dtype=np.float32)))
    kv.set_optimizer("sgd", learning_rate=0.5, momentum=0.5)
    i12 = np.arange(12)
    w = c.tensor(i12.astype(np.float32))
    kv.init(0, w)
    per = [sgd_momentum(float(i), tri * (i % 3 + 1), 4) for i in range(12)]

    def round_(r: int) -> None:
        kv.push(0, c.tensor(((rank + 1) * (i12 % 3 + 1)).astype(np.float32)))
        kv.pull(0, out=w)

    for r in range(3):
        round_(r)
        c.equal(f"opt round{r + 1}", w, [p[r][0] for p in per])
    kv.save_optimizer_states(f"{directory}/states")
    round_(3)
    c.equal("opt round4", w, [p[3][0] for p in per])
    kv.load_optimizer_states(f"{directory}/states")  # the momentum of round 3 again
    round_(4)
    expected = []
    for i, p in enumerate(per):
        w3, mom3 = p[2]
        mom5 = f32(f32(0.5 * mom3) - f32(0.5 * tri * (i % 3 + 1)))
        expected.append(f32(p[3][0] + mom5))
    c.equal("opt round5 after load", w, expected)

    # A store checkpoint at round 5 (five pushes of key 0), a sixth round,
    # then the checkpoint again: round 5's weights and momentum come back.
    assert kv.save_checkpoint(f"{directory}/store", b"rank %d" % rank) == 5
    mom5 = [f32(f32(0.5 * p[2][1]) - f32(0.5 * tri * (i % 3 + 1))) for i, p in enumerate(per)]
    round_(5)
    assert kv.load_checkpoint(f"{directory}/store") == (5, b"rank %d" % rank)
    kv.pull(0, out=w)
    c.equal("opt after load_checkpoint", w, expected)
    kv.barrier()
    round_(5)
    c.equal("opt round6 after load_checkpoint", w,
            [f32(expected[i] + f32(f32(0.5 * mom5[i]) - f32(0.5 * tri * (i % 3 + 1))))
             for i in range(12)])


def async_(kv, c: Checker) -> None:
    n = kv.num_workers
    i16 = np.arange(16)
    w = c.tensor((100.0 + i16).astype(np.float32))
    kv.init(0, w)
    kv.barrier()
    kv.set_optimizer(("sgd", {"learning_rate": 0.5}))
    ones = c.tensor(np.ones(16, np.float32))
    handles = [h for _ in range(10) for h in kv.push_async(0, ones)]
    for h in handles:
        h.wait()
    kv.barrier()
    kv.pull(0, out=w)
    c.equal("async final", w, 100.0 + i16 - 0.5 * n * 10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["numpy", "torch"], required=True)
    ap.add_argument("--scenario", choices=["sync", "optimizer", "async"], required=True)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    c = Checker(args.kind, "kvstore_worker")
    kv = tandem.kvstore.create("dist_async" if args.scenario == "async" else "dist_sync")
    if args.scenario == "sync":
        sync(kv, c)
    elif args.scenario == "optimizer":
        optimizer(kv, c, args.dir)
    else:
        async_(kv, c)
    c.done(kv.rank, kv.num_workers)
    kv.close()


if __name__ == "__main__":
    main()
