"""TANDEM_TLS=1 through `tandem launch` on loopback: a dist_sync parameter-server
job and a collectives job give exactly the results they give in plaintext
(the same checks as test_kvstore_launch.py and test_collective_launch.py),
every connection runs TLS 1.3 (PS_VERBOSE=1 logs it), and an unusable key
stops the job with an error naming the file. The CA and the job's
certificate are made for each test with the `openssl` command; no key
material is in the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from test_collective_launch import check_ok
from test_kvstore_launch import check_sync_scenario, run as run_kv_scenario

EXTENSIONS = """basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
"""


def openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f"openssl {' '.join(args)}:\n{result.stderr}"


@pytest.fixture
def tls_env(tmp_path) -> dict[str, str]:
    """A CA and one certificate every process of the job presents, as --env."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (scripts/install-deps.sh adds it)")
    ec = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    openssl("genpkey", *ec, "-out", "ca.key", cwd=tmp_path)
    openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=tandem-test-ca", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.pem", cwd=tmp_path)
    openssl("genpkey", *ec, "-out", "job.key", cwd=tmp_path)
    openssl("req", "-new", "-key", "job.key", "-subj", "/CN=tandem-job", "-out", "job.csr",
            cwd=tmp_path)
    (tmp_path / "ext.cnf").write_text(EXTENSIONS)
    openssl("x509", "-req", "-in", "job.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "job.pem",
            cwd=tmp_path)
    return {"TANDEM_TLS": "1", "TANDEM_TLS_CERT": str(tmp_path / "job.pem"),
            "TANDEM_TLS_KEY": str(tmp_path / "job.key"), "TANDEM_TLS_CA": str(tmp_path / "ca.pem")}


def assert_every_connection_ran_tls(output: str) -> None:
    sessions = re.findall(r"TLS with \S+: (\S+) (\S+), peer certificate (\S+)", output)
    assert sessions, output
    assert {version for version, _, _ in sessions} == {"TLSv1.3"}, sessions
    assert all("CN=tandem-job" in subject for _, _, subject in sessions), sessions


def test_dist_sync_kvstore_is_exact_over_tls(launch, tandem_bin_dir, tls_env):
    output, seen = run_kv_scenario(launch, tandem_bin_dir, "sync",
                                   env={**tls_env, "PS_VERBOSE": "1"}, timeout=120)
    check_sync_scenario(output, seen)
    assert_every_connection_ran_tls(output)


def test_collectives_are_exact_over_tls(launch, tandem_bin_dir, tls_env):
    result = launch(3, 0, [tandem_bin_dir / "collective_check"], extra_args=["--no-scheduler"],
                    env={**tls_env, "PS_VERBOSE": "1"}, timeout=120)
    assert result.returncode == 0, result.job.describe()
    check_ok(result.output, 3)
    assert_every_connection_ran_tls(result.output)


def test_an_unreadable_key_stops_the_job_naming_the_file(launch, tandem_bin_dir, tls_env,
                                                          tmp_path):
    missing = tmp_path / "no-such.key"
    result = launch(2, 1, [tandem_bin_dir / "kvstore_check", "--scenario", "sync"],
                    env={**tls_env, "TANDEM_TLS_KEY": str(missing)}, timeout=60)
    assert result.returncode != 0, result.job.describe()
    assert f"TANDEM_TLS_KEY: cannot read {missing}: No such file or directory" in result.output, \
        result.output


def test_bench_transport_tls_compares_both_modes(tandem_bin_dir):
    """`tandem bench transport --tls` runs its correctness pass through TLS and
    prints one row per size with plaintext and TLS figures."""
    if not (tandem_bin_dir / "transport_bench").exists():
        pytest.skip("benchmarks not built (TANDEM_BUILD_BENCH=OFF)")
    result = subprocess.run(
        [tandem_bin_dir / "tandem", "bench", "transport", "--tls", "--quick", "--rounds", "1",
         "--size", "65536"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TLS 1.3 against plaintext" in result.stdout, result.stdout
    rows = re.findall(r"^\| 64 KiB \| ([0-9.]+) \| ([0-9.]+) \| [0-9.]+ \| ([0-9.]+) \| ([0-9.]+) \|",
                      result.stdout, re.M)
    assert len(rows) == 1, result.stdout
    assert all(float(x) > 0 for x in rows[0]), rows
