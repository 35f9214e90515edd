"""A worker of tests/system/test_python_exit_codes.py: trains in rounds
through one of tandem's Python APIs, each round's result checked in closed
form, with no error handler of its own, so that what ends it after a peer's
kill is tandem's exit hook (tandem/_exit.py).

    exit_code_worker.py --api kvstore|collectives|torch --phase training|exit

--phase training: every rank trains until the job fails.
--phase exit: after 3 rounds rank 0 returns (and waits for the others in the
final barrier at interpreter exit) while the others sleep until killed.

Each rank prints 'exit_code: round R rank K' after round R; rank 0 prints
'exit_code: rank 0 leaves' as it returns in phase exit."""

from __future__ import annotations

import argparse
import time

import numpy as np

import tandem

EXIT_ROUNDS = 3


class KVStoreRounds:
    """Pushes rank + r to key 0 and pulls the sum of every worker's push."""

    def __init__(self) -> None:
        self.kv = tandem.kvstore.create("dist_sync")
        self.rank, self.size = self.kv.rank, self.kv.num_workers
        self.kv.init(0, np.zeros(4, dtype=np.float32))

    def round(self, r: int) -> None:
        out = np.zeros(4, dtype=np.float32)
        self.kv.push(0, np.full(4, self.rank + r, dtype=np.float32))
        self.kv.pull(0, out=out)
        expected = sum(k + r for k in range(self.size))
        assert out.tolist() == [expected] * 4, (r, out.tolist(), expected)


class CollectiveRounds:
    """Allreduces rank + r (tandem.allreduce_ sums)."""

    def __init__(self) -> None:
        tandem.init()
        self.rank, self.size = tandem.rank(), tandem.size()

    def round(self, r: int) -> None:
        x = np.full(4, self.rank + r, dtype=np.float32)
        tandem.allreduce_(x)
        expected = sum(k + r for k in range(self.size))
        assert x.tolist() == [expected] * 4, (r, x.tolist(), expected)


class TorchRounds:
    """SGD (lr 1) on loss = (rank + 1) * sum(w) through DistributedOptimizer,
    which averages the gradients: after round r every w is -r(n + 1)/2."""

    def __init__(self) -> None:
        import torch
        import tandem.torch as tt
        tandem.init()
        self.torch = torch
        self.rank, self.size = tandem.rank(), tandem.size()
        self.w = torch.nn.Parameter(torch.zeros(4))
        self.opt = tt.DistributedOptimizer(torch.optim.SGD([self.w], lr=1.0),
                                           named_parameters=[("w", self.w)])

    def round(self, r: int) -> None:
        self.opt.zero_grad()
        ((self.rank + 1) * self.w.sum()).backward()
        self.opt.step()
        expected = -r * (self.size + 1) / 2
        assert self.w.tolist() == [expected] * 4, (r, self.w.tolist(), expected)


APIS = {"kvstore": KVStoreRounds, "collectives": CollectiveRounds, "torch": TorchRounds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=sorted(APIS), required=True)
    parser.add_argument("--phase", choices=["training", "exit"], required=True)
    args = parser.parse_args()
    rounds = APIS[args.api]()
    last = EXIT_ROUNDS if args.phase == "exit" else 100000
    for r in range(1, last + 1):
        rounds.round(r)
        print(f"exit_code: round {r} rank {rounds.rank}", flush=True)
        time.sleep(0.05)
    if rounds.rank == 0:
        print("exit_code: rank 0 leaves", flush=True)
        return
    time.sleep(120)  # killed long before


if __name__ == "__main__":
    main()
