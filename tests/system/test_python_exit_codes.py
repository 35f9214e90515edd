"""A Python worker that loses a peer exits with 200, the retryable code of
docs/deploy.md ("Exit codes and restarts"), through every API and wherever
the loss finds it: each case runs a 2-worker `tandem launch` job, kills
worker 1 with SIGKILL and checks worker 0's exit status.

- phase training: worker 0 is inside a push, an allreduce or an optimizer
  step; the uncaught tandem.PeerLost ends it (tandem/_exit.py's hook);
- phase exit: worker 0 finished and waits in the final barrier at
  interpreter exit (KVStore.close(), tandem.shutdown()), where Python would
  print the error as ignored and exit with 0.

The KVStore's phase training is test_job_stop.py's
test_a_python_worker_exits_200_when_a_peer_is_killed. Skipped with a reason
when the Python package (or, for the torch case, torch) is missing."""

from __future__ import annotations

import pytest

from python_job import python_env, worker
from test_job_stop import kill_worker_1_and_check_worker_0_exits_200

# (api, servers): the KVStore needs a server; the collectives need none.
APIS = [("kvstore", 1), ("collectives", 0), ("torch", 0)]
CASES = [(api, servers, phase) for api, servers in APIS for phase in ("training", "exit")
         if (api, phase) != ("kvstore", "training")]
READY = {"training": r"\[worker 1\] exit_code: round 3 rank 1\b",
         "exit": r"\[worker 0\] exit_code: rank 0 leaves"}
LAST_WORDS = {"training": r"(tandem\._core\.)?PeerLost: .*lost worker (rank )?1\b",
              "exit": r"tandem: leaving the job at exit failed:"}


@pytest.mark.parametrize("api,servers,phase", CASES,
                         ids=[f"{api}-{phase}" for api, _, phase in CASES])
def test_a_python_worker_exits_200_when_its_peer_is_killed(launch, tandem_bin_dir, api, servers,
                                                           phase):
    env = python_env(tandem_bin_dir)
    if api == "torch":
        pytest.importorskip("torch")
    job = launch.start(2, servers, worker("exit_code_worker.py") +
                       ["--api", api, "--phase", phase], launcher_env=env)
    kill_worker_1_and_check_worker_0_exits_200(job, READY[phase], LAST_WORDS[phase])
    assert "PeerLost" in job.output and "lost worker" in job.output, job.describe()
