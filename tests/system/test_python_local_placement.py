"""tandem.local_rank() and tandem.local_size() read the start-up contract as
the C++ runtime does (tandem::ReadLocalPlacement, docs/contracts.md), then
LOCAL_RANK/LOCAL_WORLD_SIZE and HOROVOD_LOCAL_RANK/_SIZE: one process per
environment of the table, its answer checked exactly. (Under a real
`tandem launch` job: test_python_collectives.py's Horovod-style worker.)"""

from __future__ import annotations

import os
import subprocess

import pytest

from python_job import PYTHON, python_env

SLURM = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NUM_NODES": "2",
         "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_STEP_NODELIST": "n[1-2]"}
CASES = {
    "alone": ({}, "None 0 1"),
    "tandem": ({"TANDEM_WORLD_SIZE": "4", "TANDEM_RANK": "3", "TANDEM_LOCAL_RANK": "1",
                "TANDEM_LOCAL_SIZE": "2"}, "tandem 1 2"),
    "ompi": ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
              "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "ompi 1 2"),
    "pmi": ({"PMI_RANK": "2", "PMI_SIZE": "6", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"},
            "pmi 2 3"),
    "slurm_first_node": ({**SLURM, "SLURM_PROCID": "1", "SLURM_NODEID": "0",
                          "SLURM_LOCALID": "1"}, "slurm 1 2"),
    "slurm_second_node": ({**SLURM, "SLURM_PROCID": "2", "SLURM_NODEID": "1",
                           "SLURM_LOCALID": "0"}, "slurm 0 1"),
    "torchrun": ({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                  "TORCHELASTIC_RUN_ID": "r1"}, "torchrun 1 4"),
    "local_rank_only": ({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3"}, "None 2 3"),
    "horovodrun": ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
                    "HOROVOD_LOCAL_SIZE": "2"}, "None 1 2"),
    # The explicit contract wins over the launcher variables also present.
    "tandem_over_torchrun": ({"TANDEM_WORLD_SIZE": "2", "TANDEM_RANK": "1",
                              "TANDEM_LOCAL_RANK": "0", "TANDEM_LOCAL_SIZE": "1",
                              "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "tandem 0 1"),
}
ERRORS = {
    "bad_local_rank": ({"LOCAL_RANK": "one"}, "ConfigError: LOCAL_RANK='one' is not a whole"),
    "local_rank_past_size": ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                              "OMPI_COMM_WORLD_LOCAL_RANK": "2",
                              "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
                             "OMPI_COMM_WORLD_LOCAL_RANK"),
}
CODE = ("import tandem, tandem._core as c\n"
        "p = c.local_placement()\n"
        "print(p[0] if p else None, tandem.local_rank(), tandem.local_size())\n")


def run(tandem_bin_dir, variables: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(
        ("TANDEM_", "DMLC_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "HOROVOD_", "MPI_"))
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID")}
    env.update(python_env(tandem_bin_dir))
    env.update(variables)
    return subprocess.run([PYTHON, "-c", CODE], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_local_rank_and_size(tandem_bin_dir, case):
    variables, expected = CASES[case]
    result = run(tandem_bin_dir, variables)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected, (variables, result.stdout)


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_unusable_variables_are_named(tandem_bin_dir, case):
    variables, message = ERRORS[case]
    result = run(tandem_bin_dir, variables)
    assert result.returncode == 78 and message in result.stderr, result
