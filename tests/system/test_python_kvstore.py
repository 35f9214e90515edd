"""tandem.kvstore (the Python bindings) through `tandem launch` on loopback:
tests/system/python_workers/kvstore_worker.py repeats the scenarios of
tests/programs/kvstore_check.cc on NumPy arrays and on torch tensors, checks
every pulled value in closed form and every bad call's mapped exception and
C++ message; this file checks that every rank did and ran the same checks."""

from __future__ import annotations

import subprocess

import pytest

from python_job import PYTHON, check_ok, python_env, worker


@pytest.mark.parametrize("kind,workers,servers", [("numpy", 2, 1), ("numpy", 4, 2),
                                                  ("torch", 3, 2)])
def test_sync_exact_results_and_mapped_errors(launch, tandem_bin_dir, kind, workers, servers):
    result = launch(workers, servers, worker("kvstore_worker.py") +
                    ["--kind", kind, "--scenario", "sync"],
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    checks = check_ok(result.output, "kvstore_worker", workers, kind)
    assert checks >= 25, checks
    # The mapped class and the C++ text, on every rank.
    for rank in range(workers):
        assert (f"[worker {rank}] kvstore_worker: error dtype: InvalidArgument: key 6: push "
                f"expected dtype float32, got float64") in result.output, result.output


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_optimizer_on_the_servers_and_saved_states(launch, tandem_bin_dir, tmp_path, kind):
    result = launch(2, 2, worker("kvstore_worker.py") +
                    ["--kind", kind, "--scenario", "optimizer", "--dir", str(tmp_path)],
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    # 5 refused optimizer values and 3 refused keys, on every worker; 5 checks
    # of the optimizer states, 2 of the store checkpoint (round 5).
    assert check_ok(result.output, "kvstore_worker", 2, kind) == 15
    for rank in (0, 1):
        assert (f"[worker {rank}] kvstore_worker: error set_optimizer {{'momentum': 5}}: "
                "InvalidArgument: set_optimizer: optimizer 'sgd': parameter 'momentum' is 5, "
                "must be in [0, 1)") in result.output, result.output
        assert (f"[worker {rank}] kvstore_worker: error key 9223372036854775808: "
                "InvalidArgument: key 9223372036854775808 is outside 0..2147483647"
                ) in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["states.server0", "states.server1",
                                                          "store"]
    assert sorted(p.name for p in (tmp_path / "store" / "round-5").iterdir()) == [
        "MANIFEST", "server-0.ckpt", "server-1.ckpt", "worker-0.ckpt", "worker-1.ckpt"]


def test_async_applies_every_push(launch, tandem_bin_dir):
    result = launch(2, 1, worker("kvstore_worker.py") + ["--kind", "numpy", "--scenario",
                                                          "async"],
                    launcher_env=python_env(tandem_bin_dir), timeout=120)
    assert result.returncode == 0, result.job.describe()
    assert check_ok(result.output, "kvstore_worker", 2, "numpy") == 1


LOCAL = r"""
import numpy as np, torch, tandem
kv = tandem.kvstore.create("local")
assert (kv.rank, kv.num_workers, kv.num_servers, kv.type) == (0, 1, 0, "local")
w = np.arange(6, dtype=np.float32)
kv.init("w", w)
t = torch.zeros(6)
kv.push("w", [torch.ones(6), np.full(6, 2, np.float32)])   # two devices, mixed kinds
kv.pull("w", out=t)
assert t.tolist() == [3.0] * 6, t
# Zero copy: pull writes the caller's memory, NumPy and torch alike.
a = np.zeros(6, np.float32); before = a.ctypes.data
kv.pull("w", out=a)
assert a.ctypes.data == before and a.tolist() == [3.0] * 6
shared = torch.zeros(6); view = shared.numpy()
kv.pull("w", out=shared)
assert view.tolist() == [3.0] * 6                            # same memory as the tensor
try:
    kv.set_optimizer("sgd", learning_rate=0.5, momentum=5)
except tandem.InvalidArgument as e:
    assert "optimizer 'sgd': parameter 'momentum' is 5, must be in [0, 1)" in str(e), e
else:
    raise AssertionError("momentum=5 taken")
kv.set_optimizer("sgd", learning_rate=0.5)
kv.push("w", np.ones(6, np.float32))
kv.pull("w", out=a)
assert a.tolist() == [2.5] * 6, a
try:
    kv.push("w", torch.ones(6, dtype=torch.float64))
except tandem.InvalidArgument as e:
    assert "expected dtype float32, got float64" in str(e), e
    assert isinstance(e, tandem.Error) and isinstance(e, ValueError)
else:
    raise AssertionError("no error")
try:
    tandem.kvstore.create("dist_sync")
except tandem.Error as e:
    print("dist outside a job:", type(e).__name__, e)
else:
    raise AssertionError("no error")
print("local ok")
"""


def run_alone(tandem_bin_dir, script: str) -> subprocess.CompletedProcess:
    """Runs `script` in one Python process outside any job; it must succeed."""
    env = python_env(tandem_bin_dir)
    import os
    full = dict(os.environ)
    for k in list(full):
        if k.startswith("DMLC_") or k.startswith("TANDEM_"):
            del full[k]
    full.update(env)
    out = subprocess.run([PYTHON, "-c", script], env=full, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_local_store_in_one_process_zero_copy_and_errors(tandem_bin_dir):
    out = run_alone(tandem_bin_dir, LOCAL)
    assert "local ok" in out.stdout
    assert "dist outside a job: " in out.stdout


# Every call that takes a key, with the key alone and first in a list; KEY is
# replaced by the key under test. A bad key fails before anything happens.
KEY_RANGE = r"""
import numpy as np, tandem
kv = tandem.kvstore.create("local")
kv.init(0, np.zeros((2, 3), np.float32))
a, rows = np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32)
calls = {
    "init": lambda k: kv.init(k, a), "push": lambda k: kv.push(k, a),
    "pull": lambda k: kv.pull(k, out=a), "pushpull": lambda k: kv.pushpull(k, a, out=a),
    "push_async": lambda k: kv.push_async(k, a),
    "row_sparse_pull": lambda k: kv.row_sparse_pull(k, out=rows, row_ids=[1]),
    "row_sparse_push": lambda k: kv.row_sparse_push(k, rows, [1]),
    "init list": lambda k: kv.init([k, 1], [a, a]),
    "push list": lambda k: kv.push([k, 0], [a, a]),
    "pull list": lambda k: kv.pull([k, 0], out=[a, a]),
    "pushpull list": lambda k: kv.pushpull([k, 0], [a, a], out=[a, a]),
    "row_sparse_pull list": lambda k: kv.row_sparse_pull([k, 0], out=[rows, rows],
                                                         row_ids=[[1], [1]]),
}
for name, call in calls.items():
    try:
        call(KEY)
    except tandem.InvalidArgument as e:
        assert str(e) == f"key {KEY} is outside 0..2147483647", (name, str(e))
    else:
        raise AssertionError(f"{name}: key {KEY} taken")
# Nothing happened: key 0 is still zero and takes a push.
kv.push(0, np.ones((2, 3), np.float32))
kv.pull(0, out=a)
assert a.tolist() == [[1.0] * 3] * 2, a
print("keys refused", len(calls))
"""


# Row ids must be ints in 0..2**63-1; ROW is replaced by the id under test.
ROW_RANGE = r"""
import numpy as np, tandem
kv = tandem.kvstore.create("local")
kv.init(0, np.zeros((2, 3), np.float32))
rows = np.ones((1, 3), np.float32)
for call in (lambda: kv.row_sparse_push(0, rows, [ROW]),
             lambda: kv.row_sparse_pull(0, out=rows, row_ids=[ROW]),
             lambda: kv.row_sparse_pull(0, out=rows, row_ids=np.array([ROW], dtype=object))):
    try:
        call()
    except tandem.InvalidArgument as e:
        print("refused:", e)
    else:
        raise AssertionError(f"row id {ROW!r} taken")
a = np.zeros((2, 3), np.float32)
kv.pull(0, out=a)
assert a.tolist() == [[0.0] * 3] * 2, a
print("rows refused")
"""


@pytest.mark.parametrize("row,message", [
    ("2**63", "row id 9223372036854775808 is outside 0..9223372036854775807"),
    ("-1", "row id -1 is outside 0..9223372036854775807"),
    ("-2**64", "row id -18446744073709551616 is outside 0..9223372036854775807"),
    ("1.5", "row id 1.5 is not an integer"),
])
def test_row_ids_outside_the_range_raise_invalid_argument(tandem_bin_dir, row, message):
    out = run_alone(tandem_bin_dir, ROW_RANGE.replace("ROW", f"({row})"))
    assert out.stdout.count(f"refused: {message}\n") == 3, out.stdout
    assert "rows refused" in out.stdout, out.stdout


@pytest.mark.parametrize("key", ["2**63", "-1", "2**31", "-2**64", "2**200"])
def test_keys_outside_the_range_raise_invalid_argument(tandem_bin_dir, key):
    out = run_alone(tandem_bin_dir, KEY_RANGE.replace("KEY", f"({key})"))
    assert "keys refused 12" in out.stdout, out.stdout
