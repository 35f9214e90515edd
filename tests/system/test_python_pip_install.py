"""`pip install ./python` from the source tree, offline, into a virtual
environment that sees Debian's NumPy (python/setup.py), reusing the test's
build tree (TANDEM_CMAKE_BUILD_DIR) so that nothing is recompiled; the
installed package then imports from elsewhere and works."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from python_job import PYTHON, python_env

REPO = Path(__file__).resolve().parents[2]


def test_pip_install_from_the_source_tree(tandem_bin_dir, tmp_path):
    python_env(tandem_bin_dir)  # skips when the package was not built
    venv = tmp_path / "env"
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["TANDEM_CMAKE_BUILD_DIR"] = str(tandem_bin_dir.parent)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-deps",
                          str(REPO / "python")], env=env, capture_output=True, text=True,
                         timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert "Successfully installed tandem-0.1.0" in pip.stdout, pip.stdout
    code = ("import numpy as np, tandem, tandem.torch\n"
            "kv = tandem.kvstore.create('local'); a = np.arange(4, dtype=np.float32)\n"
            "kv.init(0, a); kv.push(0, np.ones(4, np.float32)); kv.pull(0, out=a)\n"
            "print(tandem.__file__, a.tolist())\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert str(venv) in run.stdout and "[1.0, 1.0, 1.0, 1.0]" in run.stdout, run.stdout


def test_wheel_installs_offline_with_the_tandem_command(tandem_bin_dir, tmp_path):
    """`pip wheel ./python` once, then the wheel into a fresh environment with
    no index: tandem.__version__ is the binary's, and the `tandem` console
    script runs the packaged binary."""
    python_env(tandem_bin_dir)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["TANDEM_CMAKE_BUILD_DIR"] = str(tandem_bin_dir.parent)
    dist = tmp_path / "dist"
    wheel = subprocess.run([PYTHON, "-m", "pip", "wheel", "-v", "--no-index", "--no-deps",
                            "--no-build-isolation", "-w", str(dist), str(REPO / "python")],
                           env=env, capture_output=True, text=True, timeout=600)
    assert wheel.returncode == 0, wheel.stdout + wheel.stderr
    assert "tandem setup.py: building tandem's Python module and command" in \
        wheel.stdout + wheel.stderr, wheel.stdout + wheel.stderr
    wheels = list(dist.glob("tandem-*.whl"))
    assert len(wheels) == 1, list(dist.iterdir())

    venv = tmp_path / "fresh"
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    env.pop("TANDEM_CMAKE_BUILD_DIR")
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-deps",
                          str(wheels[0])], env=env, capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    expected = subprocess.run([str(tandem_bin_dir / "tandem"), "version"], capture_output=True,
                              text=True, check=True).stdout.strip()
    run = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import tandem; print(tandem.__version__, tandem.__file__)"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    version, location = run.stdout.split()
    assert f"tandem {version}" == expected and location.startswith(str(venv)), run.stdout
    command = subprocess.run([str(venv / "bin" / "tandem"), "version"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert command.returncode == 0 and command.stdout.strip() == expected, command
    job = subprocess.run([str(venv / "bin" / "tandem"), "launch", "-n", "2", "--", "true"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert job.returncode == 0, job.stderr
