"""A worker of tests/system/test_python_torch.py: an unchanged DDP training
loop whose gradient buckets are summed by tandem's parameter servers through
tandem.torch.kvstore_hook (BytePS's summation on servers, for DDP). The
model is cut into several buckets (bucket_cap_mb) and each bucket into
partitions (--partition-bytes), so keys of every kind travel; after K steps
the parameters must equal one process trained on the union of the ranks'
batches (rtol 1e-5, atol 1e-6), and the replicas are compared by the test
through a hash. Prints

    ddp_server_hook: done rank=R size=N keys=K sha=HEX

    ddp_server_hook_worker.py --backend gloo|tandem [--steps K] [--partition-bytes B]
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import tandem
import tandem.torch as tt
from torch_worker import batch, digest  # the same batches and hash


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # a different start per rank: DDP's broadcast must fix it
    return nn.Sequential(nn.Linear(10, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(),
                         nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["gloo", "tandem"], required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--partition-bytes", type=int, default=131072)
    args = ap.parse_args()
    torch.set_num_threads(1)
    kv = tandem.kvstore.create("dist_sync")
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    assert (rank, n) == (kv.rank, kv.num_workers), (rank, n, kv.rank, kv.num_workers)
    model = make_model(seed=rank)
    # 1 MB per 512 x 512 layer; DDP's first bucket holds up to 1 MB, later
    # ones bucket_cap_mb: several buckets, rebuilt after the first step.
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.5)
    state = tt.KVStoreHookState(kv, partition_bytes=args.partition_bytes)
    ddp.register_comm_hook(state, tt.kvstore_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    reference = copy.deepcopy(make_model(seed=0))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        xs, ys = zip(*(batch(r, step) for r in range(n)))
        ref_opt.zero_grad()
        loss_fn(reference(torch.cat(xs)), torch.cat(ys)).backward()
        ref_opt.step()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            print(f"ddp_server_hook: WRONG {name} differs from the single-process reference by "
                  f"{(p - q).abs().max().item()}", file=sys.stderr, flush=True)
            sys.exit(1)
    print(f"ddp_server_hook: done rank={rank} size={n} keys={state.num_keys} "
          f"sha={digest(model)}", flush=True)
    del ddp  # before the group (docs/pytorch-backend.md)
    dist.destroy_process_group()
    kv.close()


if __name__ == "__main__":
    main()
