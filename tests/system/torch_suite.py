"""Runs PyTorch's own distributed test suite (python3-torch's
torch/testing/_internal/distributed/distributed_test.py,
DistributedTest._DistTestBase) against a backend, the way torch's
test_distributed_spawn.py does: every test starts WORLD_SIZE processes that
init_process_group(BACKEND) through a FileStore.

    /usr/bin/python3 tests/system/torch_suite.py --backend tandem|tandem-as-gloo|gloo
        [-k PATTERN ...] [--outcomes FILE] [--start-method fork|spawn]

The processes are forked by default: each inherits the imported torch
instead of importing it again, which takes the listed cases from 283 to
39 s on 2 cores (spawn, as torch's own file, stays available).

For "tandem" the spawned processes import tandem.torch (which registers the
backend) and the suite is told it is a plugin backend
(DistTestCases.backend_feature["plugin"]), which is how 1.13's suite
selects the cases a plugin can run; "ddp" is added too, since the backend
runs DDP. The last line is "torch_suite: backend=B world=N ran=R passed=P
skipped=S failed=F"; --outcomes writes one line per case ("name outcome
[reason]"). The package is imported from PYTHONPATH (build/python).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import types
import unittest


def _backend_from_argv() -> str:
    for i, a in enumerate(sys.argv):
        if a == "--backend" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--backend="):
            return a.split("=", 1)[1]
    return os.environ.get("TORCH_SUITE_BACKEND", "tandem")


# The backend the cases run on, and the one the suite is told about: with
# "tandem-as-gloo" the suite selects and checks its cases as for gloo while
# every default group is tandem's (the cases gloo runs, on tandem).
# Read by distributed_test.py when it is imported, in this process and in
# every spawned one (which imports this file as __mp_main__ and inherits the
# environment).
os.environ["TORCH_SUITE_BACKEND"] = _backend_from_argv()
os.environ["BACKEND"] = {"tandem-as-gloo": "gloo"}.get(os.environ["TORCH_SUITE_BACKEND"],
                                                        os.environ["TORCH_SUITE_BACKEND"])
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch-suite-"))

if os.environ["TORCH_SUITE_BACKEND"].startswith("tandem"):
    import tandem.torch  # noqa: F401,E402  (registers the backend)


def _stand_in_for_expecttest() -> None:
    """torch's common_utils imports expecttest, a pip module that Debian does
    not package, for its TestCase base and its ACCEPT flag (golden-output
    tests, none of them in the distributed suite): a module with just those
    two stands in when the real one is absent."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        module = types.ModuleType("expecttest")
        module.ACCEPT = False
        module.TestCase = unittest.TestCase
        sys.modules["expecttest"] = module


_stand_in_for_expecttest()

import torch.multiprocessing  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402

if os.environ["BACKEND"] == "tandem":
    DistTestCases.backend_feature["plugin"].add("tandem")
    DistTestCases.backend_feature["ddp"].add("tandem")

if os.environ["TORCH_SUITE_BACKEND"] == "tandem-as-gloo":
    import torch.distributed as _dist  # noqa: E402

    _init_process_group = _dist.init_process_group

    def _init_on_tandem(backend=None, *args, **kwargs):
        """The suite's default groups, asked for as gloo, on tandem."""
        if backend is None or str(backend).lower() == "gloo":
            backend = "tandem"
        return _init_process_group(backend, *args, **kwargs)

    _dist.init_process_group = _init_on_tandem
    _dist.distributed_c10d.init_process_group = _init_on_tandem


class TestDistBackendWithSpawn(distributed_test.TestDistBackend,
                               distributed_test.DistributedTest._DistTestBase):
    """The suite's cases, each in WORLD_SIZE fresh processes, started by
    `start_method` (main() sets it from --start-method)."""

    start_method = "fork"

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context(self.start_method).Process)


class _Outcomes(unittest.TextTestResult):
    """Records each case's outcome as well as printing it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: list[tuple[str, str, str]] = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.append((test.id().split(".")[-1], "passed", ""))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes.append((test.id().split(".")[-1], "skipped", reason))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes.append((test.id().split(".")[-1], "failed", str(err[1]).splitlines()[0]
                              if str(err[1]) else err[0].__name__))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append((test.id().split(".")[-1], "failed", str(err[1]).splitlines()[0]
                              if str(err[1]) else err[0].__name__))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default=os.environ["TORCH_SUITE_BACKEND"],
                        choices=["tandem", "tandem-as-gloo", "gloo"])
    parser.add_argument("--world-size", default=os.environ["WORLD_SIZE"])
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="run the cases whose name contains PATTERN (unittest's -k)")
    parser.add_argument("--cases", help="run exactly the cases named in this file (one per "
                        "line; # starts a comment)")
    parser.add_argument("--outcomes", help="write one line per case to this file")
    parser.add_argument("--start-method", choices=["fork", "spawn"],
                        default=TestDistBackendWithSpawn.start_method,
                        help="how each case's processes start: fork (the default: they "
                        "inherit this process's imported torch; the 87 listed cases take 39 s) "
                        "or spawn, as torch's test_distributed_spawn.py (each process imports "
                        "torch again: 283 s)")
    args = parser.parse_args()
    if args.world_size != os.environ["WORLD_SIZE"]:
        parser.error("give the world size through WORLD_SIZE (the spawned processes read it)")
    # setUp runs in this process, which starts each case's processes.
    TestDistBackendWithSpawn.start_method = args.start_method

    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = [f"*{p}*" for p in args.patterns]
    if args.cases:
        with open(args.cases) as f:
            names = [line.split("#")[0].strip() for line in f]
        suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names if n)
    else:
        suite = loader.loadTestsFromTestCase(TestDistBackendWithSpawn)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Outcomes, stream=sys.stdout)
    result = runner.run(suite)
    counts = {k: sum(1 for o in result.outcomes if o[1] == k)
              for k in ("passed", "skipped", "failed")}
    if args.outcomes:
        with open(args.outcomes, "w") as f:
            for name, outcome, reason in sorted(result.outcomes):
                f.write(f"{name} {outcome} {reason}".rstrip() + "\n")
    print(f"torch_suite: backend={args.backend} world={args.world_size} "
          f"ran={result.testsRun} passed={counts['passed']} skipped={counts['skipped']} "
          f"failed={counts['failed']}", flush=True)
    return 0 if counts["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
