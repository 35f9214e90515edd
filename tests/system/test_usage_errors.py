"""Every command-line mistake exits 2 with one line that says what was wrong
(and, for a misspelt subcommand or flag, the closest valid one); --help,
--version and `tandem version` exit 0 (docs/deploy.md, "Exit codes")."""

from __future__ import annotations

import subprocess

import pytest

BAD = [
    # Subcommands: misspelt (the closest one), unknown (the list), missing.
    (["lanch"], "'lanch' is not a tandem command; did you mean 'launch'?"),
    (["schedular"], "did you mean 'scheduler'?"),
    (["frobnicate"], "'frobnicate' is not a tandem command (commands:"),
    ([], "tandem needs a command: launch,"),
    (["k8s", "rendr", "--kind", "pytorchjob"],
     "'rendr' is not a tandem k8s command; did you mean 'render'?"),
    (["k8s"], "tandem k8s needs a command: render"),
    (["timeline", "merg", "-o", "out.json", "in.json"],
     "'merg' is not a tandem timeline command; did you mean 'merge'?"),
    (["version", "extra"], "The following argument was not expected: extra"),
    # Flags: misspelt (the closest one), unknown, with a bad or missing value.
    (["--helpp"], "did you mean '--help'?"),
    (["launch", "--num-wrkers", "2", "--", "true"],
     "tandem launch has no option '--num-wrkers'; did you mean '--num-workers'?"),
    (["launch", "-n", "2", "--bogus", "--", "true"], "tandem launch has no option '--bogus'"),
    (["launch", "-n", "x", "--", "true"], "--num-workers: 'x' is not a whole number"),
    (["launch", "-n", "0", "--", "true"], "the number of workers must be between 1 and 65536"),
    (["launch", "-n", "2", "-s", "-1", "--", "true"], "the number of servers must be between"),
    (["launch", "-n"], "--num-workers"),
    (["launch", "-n", "2", "--launcher"], "--launcher: 1 required"),
    (["launch", "--", "true"], "how many workers? give -n N"),
    (["launch", "-n", "2"], "no command: put the workers' program after '--'"),
    (["launch", "-n", "2", "python3", "train.py", "--epochs", "3"],
     "put the program and its arguments after '--'"),
    (["launch", "--launcher", "yarn", "-n", "1", "--", "true"], "launcher 'yarn' does not exist"),
    (["launch", "-n", "1", "--env", "FOO", "--", "true"], "--env 'FOO' is not of the form"),
    (["launch", "-n", "1", "--teardown-grace", "soon", "--", "true"],
     "'soon' is not a number of seconds"),
    (["launch", "-n", "1", "--restart-policy", "never", "--", "true"], "--restart-policy"),
    (["launch", "-n", "1", "--max-restarts", "-2", "--", "true"], "--max-restarts"),
    (["launch", "-n", "1", "--scheduler-port", "70000", "--", "true"], "the scheduler port"),
    # Elastic worker counts (--workers MIN:MAX, docs/launch.md).
    (["launch", "--workers", "a:4", "-s", "1", "--", "true"],
     "--workers 'a:4' is not a number of workers: give --workers N, or --workers MIN:MAX"),
    (["launch", "--workers", "", "-s", "1", "--", "true"], "--workers: an empty value"),
    (["launch", "--workers", "0:4", "-s", "1", "--", "true"],
     "--workers 0:4: MIN must be at least 1"),
    (["launch", "--workers", "5:4", "-s", "1", "--", "true"],
     "--workers 5:4: MIN (5) is above MAX (4)"),
    (["launch", "-n", "2", "--elastic-timeout", "5", "-s", "0", "--", "true"],
     "--elastic-timeout 5: only an elastic job (--workers MIN:MAX) waits below its minimum"),
    (["launch", "--workers", "2:3", "--elastic-timeout", "-1", "-s", "0", "--", "true"],
     "--elastic-timeout"),
    (["launch", "-n", "3", "--workers", "2:4", "-s", "1", "--", "true"],
     "-n/-np 3 disagrees with --workers 2:4, which starts 4 workers"),
    (["launch", "-np", "3", "--workers", "2:4", "-s", "1", "--", "true"],
     "-n/-np 3 disagrees with --workers 2:4, which starts 4 workers"),
    (["launch", "--workers", "3:4", "-s", "1", "--launcher", "mpi", "--", "true"],
     "under --launcher mpi mpirun ends the whole job when one rank fails: elastic worker counts "
     "need --launcher local or ssh"),
    (["launch", "--workers", "3:4", "-s", "1", "--launcher", "slurm", "--", "true"],
     "under --launcher slurm srun ends the whole job"),
    (["launch", "--workers", "3:4", "-s", "1", "--launcher", "sge", "--", "true"],
     "under --launcher sge Grid Engine (qrsh) ends the whole job"),
    (["launch", "--workers", "3:4", "--", "true"],
     "needs its scheduler as a process of its own: give -s SERVERS"),
    (["launch", "--worker", "3:4", "-s", "1", "--", "true"],
     "tandem launch has no option '--worker'; did you mean '--workers'?"),
    (["k8s", "render", "--kindd", "pytorchjob"],
     "tandem k8s render has no option '--kindd'; did you mean '--kind'?"),
    (["k8s", "render", "--kind"], "--kind: 1 required"),
    (["timeline", "--bogus"], "tandem timeline has no option '--bogus'"),
    (["timeline", "merge", "-o"], "--output: 1 required"),
    (["timeline", "merge", "-o", "out.json", "/nonexistent/trace.json"],
     "File does not exist: /nonexistent/trace.json"),
    (["scheduler", "--nope"], "tandem scheduler has no option '--nope'"),
    (["server", "--hepl"], "tandem server has no option '--hepl'; did you mean '--help'?"),
    (["spawn-local", "--bogus"], "tandem spawn-local has no option '--bogus'"),
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


def test_version_subcommand_prints_what_the_flag_prints(tandem_bin_dir):
    outputs = [subprocess.run([str(tandem_bin_dir / "tandem"), arg], capture_output=True,
                              text=True, timeout=30).stdout for arg in ("version", "--version")]
    assert outputs[0] == outputs[1], outputs


def test_an_error_of_the_command_itself_keeps_its_exit_code(tandem_bin_dir, tmp_path):
    """Only parse errors become 2: a file that parses as a command line but is
    no trace is an InvalidArgument of the command, 78 (docs/deploy.md)."""
    junk = tmp_path / "junk.json"
    junk.write_text("hello\n")
    proc = subprocess.run([str(tandem_bin_dir / "tandem"), "timeline", "merge", "-o",
                           str(tmp_path / "out.json"), str(junk)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 78, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("tandem: error: ") and "is not a trace file" in proc.stderr
