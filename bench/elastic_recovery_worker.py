"""The worker of bench/elastic_recovery.py: the same training loop under
tandem's elastic API or under torchrun with DDP on gloo, printing a line
with a wall-clock time at every step, and one worker killing itself
(SIGKILL) at a chosen step of its first run.

    elastic_recovery_worker.py --runtime tandem|torchrun --steps N
        --kill-at STEP --victim WORKER [--checkpoint-dir DIR --checkpoint-every C]

The model is an MLP (784-256-10) trained with SGD and momentum on batches
of 32 drawn from a generator seeded by (step, worker).

 - tandem: tandem.torch.elastic.TorchState and run, commit after every step
   (in memory); the survivors go on, and the launcher's replacement
   (--max-restarts) joins at a commit and syncs the state.
 - torchrun: torch.nn.parallel.DistributedDataParallel on gloo;
   the worker with global rank 0 saves a checkpoint every C steps, and every
   (re)started worker resumes from it; torchrun's agent restarts every worker
   of the group when one dies (--max-restarts).

Lines: 'recovery: worker W step S t T' after step S (0-based) completed, and
'recovery: kill worker W step S t T' just before the SIGKILL."""

from __future__ import annotations

import argparse
import os
import signal
import time

import torch

BATCH = 32


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def loss_of(model: torch.nn.Module, step: int, worker: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step * 1000 + worker)
    x = torch.randn(BATCH, 784, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    return torch.nn.functional.cross_entropy(model(x), y)


def say(kind: str, worker: int, step: int) -> None:
    print(f"recovery: {kind}worker {worker} step {step} t {time.time():.6f}", flush=True)


def run_tandem(args: argparse.Namespace) -> None:
    import tandem
    import tandem.torch

    tandem.init()
    worker = int(os.environ["DMLC_WORKER_ID"])
    model, optimizer = model_and_optimizer()
    optimizer = tandem.torch.DistributedOptimizer(optimizer,
                                                  named_parameters=model.named_parameters())
    state = tandem.torch.elastic.TorchState(model, optimizer, step=0)
    first_step = None  # 0 unless this process joined the running job

    @tandem.torch.elastic.run
    def train(state) -> None:
        nonlocal first_step
        if first_step is None:
            first_step = state.step
        while state.step < args.steps:
            if worker == args.victim and state.step == args.kill_at and first_step == 0:
                say("kill ", worker, state.step)
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            loss_of(model, state.step, worker).backward()
            optimizer.step()
            say("", worker, state.step)
            state.step += 1
            state.commit()

    train(state)


def run_torchrun(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    worker = dist.get_rank()
    first_run = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0
    model, optimizer = model_and_optimizer()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    step = 0
    if os.path.exists(path):
        saved = torch.load(path)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"]
    while step < args.steps:
        if worker == args.victim and step == args.kill_at and first_run:
            say("kill ", worker, step)
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        loss_of(ddp, step, worker).backward()
        optimizer.step()
        say("", worker, step)
        step += 1
        if worker == 0 and step % args.checkpoint_every == 0:
            tmp = path + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, path)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", choices=["tandem", "torchrun"], required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--kill-at", type=int, required=True)
    parser.add_argument("--victim", type=int, required=True)
    parser.add_argument("--checkpoint-dir", default="")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.runtime == "tandem":
        run_tandem(args)
    else:
        run_torchrun(args)


if __name__ == "__main__":
    main()
