"""A worker in Horovod's style: tandem.local_rank()/local_size(), the
reduction constants, op="average", and tandem.torch's averaging default.
Prints one line with every value, which the test checks exactly."""

from __future__ import annotations

import numpy as np
import torch

import tandem
import tandem.torch as tt


def main() -> None:
    tandem.init()
    r, n = tandem.rank(), tandem.size()
    x = np.full(3, float(r + 1), dtype=np.float32)
    summed = tandem.allreduce(x)  # tandem's default: sum
    averaged = tandem.allreduce(x, op=tandem.Average)
    by_name = tandem.allreduce(x, op="average")
    largest = tandem.allreduce(x, op=tandem.Max)
    t = torch.full((2,), float(r + 1))
    tt.allreduce_(t)  # tandem.torch's default: average, as hvd.allreduce_
    t_sum = tt.allreduce(torch.full((2,), float(r + 1)), op=tt.Sum)
    print(f"horovod_api: rank={r} size={n} local_rank={tandem.local_rank()} "
          f"local_size={tandem.local_size()} sum={summed[0]:g} avg={averaged[0]:g} "
          f"average={by_name[0]:g} max={largest[0]:g} torch_default={t[0].item():g} "
          f"torch_sum={t_sum[0].item():g} version={tandem.__version__}", flush=True)
    tandem.shutdown()


if __name__ == "__main__":
    main()
