"""Runs torchrun (`torch.distributed.run`'s main) with its arguments, after
one fix: Debian's PyTorch 1.13 on Python 3.11 cannot parse its own
--redirects/--tee values (Std.from_str iterates the IntFlag Std, which from
Python 3.11 on yields no member for 0 or 3), so every torchrun fails
before starting a process. The fix is applied only where that bug shows;
everything else is PyTorch's own agent. Usage, as `python3 -m
torch.distributed.run`: `python3 torchrun_compat.py --nproc_per_node 2 ...`."""

from __future__ import annotations

import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(vm: str):
    if re.fullmatch(r"[0-3]", vm):
        return api.Std(int(vm))
    if re.fullmatch(r"(\d+:[0-3],)*\d+:[0-3]", vm):
        return {int(i): api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


if api.Std.from_str("0") is None:
    api.Std.from_str = staticmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
