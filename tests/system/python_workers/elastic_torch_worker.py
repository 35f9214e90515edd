"""A worker of tests/system/test_elastic_collectives.py: Horovod-Elastic-shaped
training (tandem.torch.elastic.TorchState, tandem.torch.elastic.run) of a
float64 linear model with tandem.torch.DistributedOptimizer (SGD with
momentum) in an elastic job (docs/elastic.md, "The elastic API").

    elastic_torch_worker.py --steps N [--leave RANK:STEP ...] [--wait-join-at STEP --places N]

Worker w's batch at step s is drawn from a generator seeded by (s, w). A
worker named by --leave RANK:STEP runs that step's backward() (its
gradients' allreduces start) and kills itself (SIGKILL) before step():
the others' step may or may not complete (a worker that joined the running
job, such as the launcher's replacement, does not leave). The state (model, optimizer,
step, and the members of every committed step) is committed after each
step; after a change every worker goes back to the lowest remaining one's
commit. At the end each survivor replays the committed steps in NumPy
(float64: the mean gradient over each step's members, SGD with momentum)
and prints 'elastic-torch: worker W replay ok max-diff D steps N restores R
weights H', H a hash of the final weights (the same on every survivor).

With --wait-join-at STEP, once STEP is committed while the world has fewer
than --places workers, every member checks for a joining worker
(tandem.check_joins()) every 20 ms until one is admitted (at most 1500
checks): a worker the test starts then joins at that step."""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import time

import numpy as np
import torch

import tandem
import tandem.torch

DIM = 8
BATCH = 4
LR = 0.05
MOMENTUM = 0.9
TRUE_W = np.linspace(-1.0, 1.0, DIM)


def batch(step: int, worker: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([step, worker])
    x = rng.standard_normal((BATCH, DIM))
    return x, x @ TRUE_W + 0.1 * rng.standard_normal(BATCH)


def replay(w0: np.ndarray, history: list[list[int]]) -> np.ndarray:
    w, buf = w0.copy(), None
    for step, members in enumerate(history):
        grads = []
        for m in members:
            x, y = batch(step, m)
            grads.append(2.0 * x.T @ (x @ w - y) / BATCH)
        g = np.mean(grads, axis=0)
        buf = g.copy() if buf is None else MOMENTUM * buf + g
        w = w - LR * buf
    return w


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--leave", action="append", default=[], metavar="RANK:STEP")
    parser.add_argument("--wait-join-at", type=int, default=-1, metavar="STEP")
    parser.add_argument("--places", type=int, default=0)
    args = parser.parse_args()
    leave = {int(r): int(s) for r, s in (item.split(":") for item in args.leave)}

    tandem.init()
    worker = tandem.rank()
    torch.manual_seed(worker)  # different on purpose: the first sync makes them rank 0's
    model = torch.nn.Linear(DIM, 1, bias=False).double()
    optimizer = tandem.torch.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
        named_parameters=model.named_parameters())
    state = tandem.torch.elastic.TorchState(model, optimizer, step=0, history=[], w0=None)
    def world_members() -> list[int]:
        # The worker ranks of the world, whatever their order in it (a
        # worker that joined comes last).
        return sorted(int(w) for w in tandem.collective._comm(None).members)

    members = world_members()
    print(f"elastic-torch: worker {worker} joined_running_job {tandem.joined_running_job()}",
          flush=True)

    def learn_members() -> None:
        nonlocal members
        members = world_members()
        print(f"elastic-torch: worker {worker} regrouped: members {members} rank "
              f"{tandem.rank()} size {tandem.size()}", flush=True)

    state.register_reset_callbacks([learn_members])

    first_step = None  # of this process: 0 unless it joined the running job

    @tandem.torch.elastic.run
    def train(state) -> None:
        nonlocal members, first_step
        members = world_members()
        if first_step is None:
            first_step = state.step
        print(f"elastic-torch: worker {worker} trains from step {state.step} rank "
              f"{tandem.rank()} size {tandem.size()}", flush=True)
        if state.w0 is None:
            state.w0 = model.weight.detach().numpy().ravel().copy()
        while state.step < args.steps:
            x, y = batch(state.step, worker)
            optimizer.zero_grad()
            pred = model(torch.from_numpy(x)).squeeze(1)
            loss = ((pred - torch.from_numpy(y)) ** 2).mean()
            loss.backward()
            if leave.get(worker) == state.step and first_step == 0:
                print(f"elastic-torch: worker {worker} leaves during step {state.step}",
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.step()
            state.history.append(list(members))
            state.step += 1
            state.commit()
            if state.step == args.wait_join_at and tandem.size() < args.places:
                for _ in range(1500):
                    tandem.check_joins()  # raises MembershipChanged once one waits
                    time.sleep(0.02)
                raise SystemExit(f"worker {worker}: no worker joined within 1500 checks")

    restores = 0
    original_restore = state.restore

    def counting_restore() -> None:
        nonlocal restores
        restores += 1
        original_restore()

    state.restore = counting_restore
    train(state)
    w = model.weight.detach().numpy().ravel()
    expected = replay(np.asarray(state.w0), state.history)
    diff = float(np.max(np.abs(w - expected) / np.maximum(np.abs(expected), 1e-12)))
    if diff > 1e-10:
        raise SystemExit(f"worker {worker}: weights {w} differ from the replay {expected} "
                         f"(max relative difference {diff})")
    digest = hashlib.sha256(w.tobytes()).hexdigest()[:16]
    print(f"elastic-torch: worker {worker} replay ok max-diff {diff:.1e} steps "
          f"{len(state.history)} restores {restores} weights {digest} history "
          f"{[len(m) for m in state.history]}", flush=True)
    tandem.shutdown()


if __name__ == "__main__":
    main()
