"""Every command-line mistake exits 2 with one line that says what was wrong
(and, for a misspelt subcommand or flag, the closest valid one); --help,
--version and `tandem version` exit 0 (docs/deploy.md, "Exit codes")."""

from __future__ import annotations

import subprocess

import pytest

BAD = [
    (["lanch"], "'lanch' is not a tandem command; did you mean 'launch'?"),
    (["schedular"], "did you mean 'scheduler'?"),
    (["frobnicate"], "'frobnicate' is not a tandem command (commands:"),
    ([], "A subcommand is required"),
    (["--helpp"], "did you mean '--help'?"),
    (["launch", "--num-wrkers", "2", "--", "true"], "did you mean '--num-workers'?"),
    (["launch", "-n", "x", "--", "true"], "--num-workers: 'x' is not a whole number"),
    (["launch", "-n", "0", "--", "true"], "the number of workers must be between 1 and 65536"),
    (["launch", "-n", "2", "-s", "-1", "--", "true"], "the number of servers must be between"),
    (["launch", "--", "true"], "how many workers? give -n N"),
    (["launch", "-n", "2"], "no command: put the workers' program after '--'"),
    (["launch", "-n", "2", "python3", "train.py", "--epochs", "3"],
     "put the program and its arguments after '--'"),
    (["launch", "-np", "x", "--", "true"], "--num-workers: 'x' is not a whole number"),
    (["launch", "--nproc-per-node", "0", "--", "true"], "workers per node must be between"),
    (["launch", "--launcher", "yarn", "-n", "1", "--", "true"], "launcher 'yarn' does not exist"),
    (["launch", "-n", "1", "--env", "FOO", "--", "true"], "--env 'FOO' is not of the form"),
    (["launch", "-n", "1", "--teardown-grace", "soon", "--", "true"],
     "'soon' is not a number of seconds"),
    (["launch", "-n", "1", "--restart-policy", "never", "--", "true"], "--restart-policy"),
    (["launch", "-n", "1", "--max-restarts", "-2", "--", "true"], "--max-restarts"),
    (["launch", "-n", "1", "--scheduler-port", "70000", "--", "true"], "the scheduler port"),
    (["k8s", "render", "--kindd", "pytorchjob"], "did you mean '--kind'?"),
    (["timeline", "--bogus"], "tandem timeline has no option '--bogus'"),
    (["scheduler", "--nope"], "tandem scheduler has no option '--nope'"),
    (["launch", "-n"], "--num-workers"),
]


@pytest.mark.parametrize("args,fragment", BAD, ids=lambda v: " ".join(v) if isinstance(v, list)
                         else None)
def test_usage_error_exits_2_with_one_line(tandem_bin_dir, args, fragment):
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), *args], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tandem: usage error: "), proc.stderr
    assert fragment in lines[0], proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("args", [["version"], ["--version"]])
def test_version(tandem_bin_dir, args):
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), *args], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("tandem ") and proc.stdout.split()[1][0].isdigit(), proc.stdout


def test_help_exits_0(tandem_bin_dir):
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), "launch", "--help"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "--nproc-per-node" in proc.stdout, proc.stderr
