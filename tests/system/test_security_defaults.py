"""Security and logging defaults (docs/security.md, docs/environment.md):

- a process that joins a job from its environment without TANDEM_SECRET
  exits 78 (ConfigError) at once, naming TANDEM_SECRET and TANDEM_INSECURE
  and how its launcher passes a secret; the built-in scheduler and server,
  a C++ worker, a torchrun-started rank and a Python process alike;
- TANDEM_INSECURE=1 runs the job anyway, each process logging one warning;
- metrics listen on 127.0.0.1 unless TANDEM_METRICS_ADDRESS says otherwise;
- PS_VERBOSE=0 leaves only warnings and errors, unset keeps the start-up
  lines; every log line's time is ISO 8601 in UTC ("...T00:35:32.648Z")."""

from __future__ import annotations

import re
import subprocess

import pytest

from python_job import PYTHON, python_env
from test_contracts_start import check_collectives, clean_env, start_as, torchrun_envs

MESSAGE = ("TANDEM_SECRET is not set (start-up contract {}): every process of a job needs the "
           "same secret (tandem launch and tandem k8s render set one); set TANDEM_SECRET=<hex> "
           "in every process's environment, or TANDEM_INSECURE=1 to run without "
           "authentication on a trusted network.")
WARNING = "TANDEM_INSECURE=1 and no TANDEM_SECRET"
# "[2026-11-27T00:35:32.648Z worker 0 I] text": tandem's log prefix.
LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S[^\]]*) ([IWE12])\] ",
                      re.M)
DMLC = {"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9", "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": "1"}


TORCHRUN_HINT = "torchrun hands its own environment to every worker"
# kind -> (argv after the binary directory is known, variables, contract,
# launcher hint, exit code). tandem's own processes and Python exit 78; the
# C++ test programs report an error with their own codes (1 and 2).
NODES = {
    "scheduler": (lambda b: [str(b / "tandem"), "scheduler"],
                  {**DMLC, "DMLC_ROLE": "scheduler"}, "dmlc", "", 78),
    "server": (lambda b: [str(b / "tandem"), "server"], {**DMLC, "DMLC_ROLE": "server"}, "dmlc",
               "", 78),
    "cpp_worker": (lambda b: [str(b / "cluster_check")], {**DMLC, "DMLC_ROLE": "worker"}, "dmlc",
                   "", 1),
    "cpp_torchrun": (lambda b: [str(b / "collective_check")], torchrun_envs(2, 9)[1], "torchrun",
                     TORCHRUN_HINT, 2),
    "python_worker": (lambda b: [PYTHON, "-c", "import tandem; tandem.kvstore.create('dist_sync')"],
                      {**DMLC, "DMLC_ROLE": "worker"}, "dmlc", "", 78),
    "python_torchrun": (lambda b: [PYTHON, "-c", "import tandem; tandem.init()"],
                        torchrun_envs(2, 9)[1], "torchrun", TORCHRUN_HINT, 78),
}


@pytest.mark.parametrize("secret", ["absent", "empty"])
@pytest.mark.parametrize("kind", sorted(NODES))
def test_a_process_without_a_secret_exits_78_saying_how_to_pass_one(tandem_bin_dir, kind,
                                                                     secret):
    argv, variables, contract, hint, code = NODES[kind]
    env = {**clean_env(), **variables}
    if kind.startswith("python"):
        env.update(python_env(tandem_bin_dir))
    if secret == "absent":
        del env["TANDEM_SECRET"]
    else:
        env["TANDEM_SECRET"] = ""
    proc = subprocess.run(argv(tandem_bin_dir), env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert MESSAGE.format(contract) in proc.stderr, proc.stderr
    assert hint in proc.stderr, proc.stderr
    assert WARNING not in proc.stderr


def insecure_job(tandem_bin_dir, tmp_path, extra: dict[str, str]) -> list[str]:
    """A two-rank collectives job under torchrun's variables without a
    secret, in insecure mode; every rank must succeed. Returns the outputs."""
    results = start_as("torchrun", [tandem_bin_dir / "collective_check"], 2, tmp_path,
                       extra={"TANDEM_SECRET": "", "TANDEM_INSECURE": "1",
                              "TANDEM_METRICS_PORT": "0", **extra})
    for i, (code, output) in enumerate(results):
        assert code == 0, f"rank {i} exited {code}:\n{output}"
        assert output.count(WARNING) == 1, output
        assert re.search(rf" W\] {WARNING}", output), output
    return [o for _, o in results]


def stamped_lines(output: str) -> list[re.Match]:
    """tandem's log lines of `output`; fails on a line that looks like one
    (a '[' and a digit) but has another prefix."""
    lines = []
    for line in output.splitlines():
        if re.match(r"^\[\d", line):
            m = LOG_LINE.match(line)
            assert m, f"not an ISO 8601 log line: {line!r}"
            lines.append(m)
    return lines


def test_insecure_mode_runs_with_one_warning_and_start_up_lines_by_default(tandem_bin_dir,
                                                                           tmp_path):
    outputs = insecure_job(tandem_bin_dir, tmp_path, {})
    check_collectives(outputs, 2, "torchrun")
    for output in outputs:
        levels = {m.group(3) for m in stamped_lines(output)}
        assert {"I", "W"} <= levels, output
        # Metrics on loopback unless an address is given.
        assert re.search(r" I\] serving metrics at http://127\.0\.0\.1:\d+/metrics", output), \
            output


def test_a_metrics_address_binds_where_it_says(tandem_bin_dir, tmp_path):
    outputs = insecure_job(tandem_bin_dir, tmp_path, {"TANDEM_METRICS_ADDRESS": "0.0.0.0"})
    for output in outputs:
        assert re.search(r" I\] serving metrics at http://0\.0\.0\.0:\d+/metrics", output), output


def test_ps_verbose_0_prints_only_warnings_and_errors(tandem_bin_dir, tmp_path):
    outputs = insecure_job(tandem_bin_dir, tmp_path, {"PS_VERBOSE": "0"})
    ranks = []
    for output in outputs:
        m = re.search(r"collective_check: ok rank=(\d+) size=2 checks=\d+", output)
        assert m, output
        ranks.append(int(m.group(1)))
        lines = stamped_lines(output)
        assert [m.group(3) for m in lines] == ["W"], output
    assert sorted(ranks) == [0, 1]
