"""tandem programs started by the real torchrun (`python3 -m
torch.distributed.run`, PyTorch's elastic agent with its static
rendezvous, through torchrun_compat.py, which fixes the one bug that stops
Debian's PyTorch 1.13 on Python 3.11 before it starts anything), not by variables a test imitates: a collectives-only job and
a parameter-server job (servers taken from the last ranks with
TANDEM_NUM_SERVERS) give exact results on one node, and a collectives job
on two "nodes" (two torchrun agents, --nnodes 2 --node_rank 0/1, on
127.0.0.1). Every process logs the torchrun contract, and tandem's
rendezvous takes MASTER_PORT + 1, since torchrun's agent holds a c10d
TCPStore on MASTER_PORT (docs/contracts.md).

Each rank's output goes to a file of its own (a shell between torchrun and
the program redirects it to <dir>/rank<RANK>.log; torchrun's --redirects 3
fails on Python 3.11), which the checks of test_contracts_start.py read."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_contracts_start import check_collectives, check_kvstore, clean_env, coordinator_port

PYTHON = "/usr/bin/python3"
# `python3 -m torch.distributed.run`, with the one fix Python 3.11 needs.
TORCHRUN = Path(__file__).with_name("torchrun_compat.py")


def torch_available() -> bool:
    return subprocess.run([PYTHON, "-c", "import torch.distributed.run"],
                          capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not torch_available(),
                                reason="PyTorch (torch.distributed.run) is not installed")


def torchrun_argv(nproc: int, nnodes: int, node_rank: int, port: int, log_dir: Path,
                  program: list[str]) -> list[str]:
    log_dir.mkdir(exist_ok=True)
    redirect = f'exec "$@" > "{log_dir}/rank$RANK.log" 2>&1'
    return [PYTHON, str(TORCHRUN), "--nproc_per_node", str(nproc), "--nnodes",
            str(nnodes), "--node_rank", str(node_rank), "--master_addr", "127.0.0.1",
            "--master_port", str(port), "--max_restarts", "0", "--no_python", "/bin/sh", "-c",
            redirect, "sh", *[str(a) for a in program]]


def rank_logs(log_dir: Path | None) -> str:
    """Every rank's log under `log_dir`, for a failure's message."""
    if log_dir is None or not log_dir.is_dir():
        return ""
    return "".join(f"\n--- {path.name}:\n{path.read_text(errors='replace')}"
                   for path in sorted(log_dir.glob("rank*.log")))


def run_agents(argvs: list[list[str]], env: dict[str, str], timeout: float = 120,
               log_dir: Path | None = None) -> list[str]:
    """Runs torchrun agents (each in a session of its own) to their end; kills
    the sessions (by their leaders' PIDs) when one does not end in time.
    Returns each agent's output; a failure shows the ranks' logs in `log_dir`."""
    procs = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for argv in argvs]
    outputs = []
    end = time.monotonic() + timeout
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(1, end - time.monotonic()))
            outputs.append(out)
    except subprocess.TimeoutExpired:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"torchrun did not finish within {timeout} s{rank_logs(log_dir)}")
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, \
            f"torchrun exited {proc.returncode}:\n{out}{rank_logs(log_dir)}"
    return outputs


def rank_outputs(log_dir: Path, world: int) -> list[str]:
    """Each process's output by its RANK."""
    return [(log_dir / f"rank{rank}.log").read_text() for rank in range(world)]


def torchrun_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = clean_env()
    env.update({"OMP_NUM_THREADS": "1", "TANDEM_START_TIMEOUT": "60"})
    env.update(extra or {})
    return env


def test_collectives_job_on_one_node(tandem_bin_dir, tmp_path):
    port = coordinator_port()
    log_dir = tmp_path / "logs"
    run_agents([torchrun_argv(3, 1, 0, port, log_dir, [tandem_bin_dir / "collective_check"])],
               torchrun_env(), log_dir=log_dir)
    outputs = rank_outputs(log_dir, 3)
    check_collectives(outputs, 3, "torchrun")
    # torchrun's agent store holds MASTER_PORT; tandem's rendezvous the port above.
    for output in outputs:
        assert (f"rendezvous at 127.0.0.1:{port + 1} (MASTER_PORT + 1: torchrun's agent store "
                "holds MASTER_PORT)") in output, output


def test_parameter_server_job_on_one_node(tandem_bin_dir, tmp_path):
    # 3 processes: ranks 0 and 1 workers, rank 2 the server.
    log_dir = tmp_path / "logs"
    run_agents([torchrun_argv(3, 1, 0, coordinator_port(), log_dir,
                              [tandem_bin_dir / "kvstore_check", "--scenario", "sync"])],
               torchrun_env({"TANDEM_NUM_SERVERS": "1"}), log_dir=log_dir)
    check_kvstore(rank_outputs(log_dir, 3), 2, 1, "torchrun")


def test_collectives_job_on_two_nodes(tandem_bin_dir, tmp_path):
    port = coordinator_port()
    log_dir = tmp_path / "logs"
    program = [tandem_bin_dir / "collective_check"]
    run_agents([torchrun_argv(2, 2, n, port, log_dir, program) for n in (0, 1)], torchrun_env(),
               log_dir=log_dir)
    outputs = rank_outputs(log_dir, 4)
    check_collectives(outputs, 4, "torchrun")
    for rank, output in enumerate(outputs):
        assert f"(local {rank % 2} of 2, node {rank // 2} of 2)" in output, output
