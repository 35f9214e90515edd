"""An MXJob's pods described by MX_CONFIG alone (docs/contracts.md, "DMLC and
MXJob"): the JSON training-operator writes, with no DMLC_* variable, for a
scheduler (`tandem scheduler`), two servers (`tandem server`) and two
workers (tests/programs/kvstore_check) on loopback. Every pulled value is
exact, each worker's rank is its task index, and the log names the DMLC
contract."""

from __future__ import annotations

import json

from test_contracts_start import check_kvstore, coordinator_port, run_commands


def mx_config(port: int, task: str, index: int, servers: int, workers: int) -> str:
    entry = {"url": "127.0.0.1", "port": port}
    return json.dumps({"cluster": {"scheduler": [entry], "server": [entry] * servers,
                                   "worker": [entry] * workers},
                       "labels": {"scheduler": "", "server": "", "worker": ""},
                       "task": {"type": task, "index": index}})


def test_an_mxjob_described_by_mx_config_alone_runs_a_parameter_server_job(tandem_bin_dir,
                                                                           tmp_path):
    port = coordinator_port()
    servers, workers = 2, 2
    tandem = str(tandem_bin_dir / "tandem")
    argv = {"scheduler": [tandem, "scheduler"], "server": [tandem, "server"],
            "worker": [str(tandem_bin_dir / "kvstore_check"), "--scenario", "sync"]}
    pods = [("scheduler", 0)] + [("server", i) for i in range(servers)] + \
        [("worker", i) for i in range(workers)]
    results = run_commands([(argv[task], {"MX_CONFIG": mx_config(port, task, index, servers,
                                                            workers)})
                       for task, index in pods], tmp_path)
    for (task, index), (code, output) in zip(pods, results):
        assert code == 0, f"{task} {index} exited {code}:\n{output}"
    worker_outputs = [o for (task, _), (_, o) in zip(pods, results) if task == "worker"]
    check_kvstore(worker_outputs, workers, servers, "dmlc")
