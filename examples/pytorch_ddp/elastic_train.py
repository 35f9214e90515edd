"""train.py made elastic: the same network, data and optimizer, trained
through workers that leave and join (Horovod Elastic's shape on
tandem.torch.elastic; docs/elastic.md, "The elastic API").

What changes against train.py:
  - the state (model, optimizer, epoch, batch) is a
    tandem.torch.elastic.TorchState, committed after every step (a copy in
    memory, no communication);
  - the training function runs under @tandem.torch.elastic.run: when a
    worker leaves, or one waits to join, the workers go back to the last
    commit, regroup and go on; a worker that joins starts from the
    others' state;
  - the learning rate follows the world size (linear scaling, a reset
    callback) and each epoch's shards are cut over the workers of the
    moment, so a step always averages the gradients of the workers there.

Run (a scheduler apart from the workers, as elastic jobs need; 3 workers,
going on with 2; a worker that dies is replaced once and joins):
  build/bin/tandem launch --launcher local -s 0 --workers 2:3 --max-restarts 1 -- \\
      /usr/bin/python3 examples/pytorch_ddp/elastic_train.py
Under Kubernetes: an elastic PyTorchJob (docs/deploy.md, "An elastic
PyTorchJob"; deploy/examples/elastic-job.json).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, DistributedSampler

try:
    import tandem
except ImportError:  # not installed: the repository's build tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "build" / "python"))
    import tandem
import tandem.torch as tt
from train import SmallResNet, add_training_arguments, synthetic_dataset, train_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_training_arguments(ap)
    args = ap.parse_args()
    torch.set_num_threads(1)

    tandem.init()
    worker = tandem.rank()  # this process's rank when it started
    torch.manual_seed(worker)  # different on purpose: the first sync makes them rank 0's
    model = SmallResNet()
    optimizer = tt.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr * tandem.size(), momentum=0.9,
                        weight_decay=5e-4),
        named_parameters=model.named_parameters())
    state = tt.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    def follow_the_world() -> None:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * tandem.size()
        print(f"worker {worker}: now rank {tandem.rank()} of {tandem.size()} workers, "
              f"learning rate {args.lr * tandem.size():g}", flush=True)

    state.register_reset_callbacks([follow_the_world])
    dataset = synthetic_dataset(args.samples, args.image_size, 10)
    if tandem.joined_running_job():
        print(f"worker {worker}: joined the running job", flush=True)

    # The epoch's loss sum, correct answers and samples on this worker, kept
    # across a change within the epoch (a step redone after one counts twice).
    totals = torch.zeros(3, dtype=torch.float64)
    started = time.monotonic()

    @tt.elastic.run
    def train(state) -> None:
        nonlocal totals, started
        while state.epoch < args.epochs:
            # This epoch's shards over the workers of the moment. After a
            # change the rest of the epoch is cut over the new workers,
            # skipping as many batches as were committed (Horovod's
            # ElasticSampler tracks the very samples instead).
            sampler = DistributedSampler(dataset, num_replicas=tandem.size(), rank=tandem.rank(),
                                         shuffle=True, seed=7)
            sampler.set_epoch(state.epoch)
            loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                                drop_last=True)
            model.train()
            if state.batch == 0:
                started = time.monotonic()
                totals = torch.zeros(3, dtype=torch.float64)
            for index, (x, y) in enumerate(loader):
                if index < state.batch:
                    continue  # done before the last commit
                totals += train_step(model, optimizer, x, y)
                state.batch = index + 1
                state.commit()
            seconds = time.monotonic() - started
            epoch = totals.clone()
            tandem.allreduce_(epoch)  # over the workers at the epoch's end
            if tandem.rank() == 0 and epoch[2] > 0:
                print(f"epoch {state.epoch + 1}/{args.epochs}: loss "
                      f"{epoch[0] / epoch[2]:.4f} train accuracy "
                      f"{100 * epoch[1] / epoch[2]:.1f}% ({tandem.size()} workers), "
                      f"{int(epoch[2]) / seconds:.0f} samples/s", flush=True)
            state.epoch += 1
            state.batch = 0
            state.commit()

    train(state)
    print(f"worker {worker}: done as rank {tandem.rank()} of {tandem.size()}", flush=True)
    tandem.shutdown()


if __name__ == "__main__":
    main()
