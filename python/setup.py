"""pip's entry to the tandem Python package: builds tandem._core with the
repository's CMake build (target tandem_python) and installs it with the
package's Python files. Offline, with Debian's packages (no pyproject.toml,
so pip builds in place without an isolated environment to download into):

    /usr/bin/python3 -m venv --system-site-packages ENV   # Debian's interpreter is
                                                          # "externally managed"
    ENV/bin/pip install -v --no-index ./python            # from the repository root
    ENV/bin/pip wheel -v --no-index --no-deps -w dist ./python   # a wheel, installable offline
    TANDEM_CMAKE_BUILD_DIR=$PWD/build ENV/bin/pip install --no-index ./python
                                     # reuse an existing build tree (no rebuild of tandem)

The package holds the extension module and the `tandem` command (the C++
binary, run by the `tandem` console script). The build prints its steps and
CMake's progress; pip shows them with -v. docs/python.md.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class CMakeBuild(build_ext):
    """Configures the repository with CMake (tests and benchmarks off, this
    interpreter) and builds the one target that makes tandem._core (and,
    with LibTorch, tandem._c10d)."""

    def build_extension(self, ext: Extension) -> None:
        if not (REPO / "CMakeLists.txt").is_file() or not (REPO / "include" / "tandem").is_dir():
            raise RuntimeError(f"{REPO} is not tandem's source tree: install from a checkout "
                               "(pip install ./python in the repository root)")
        reuse = os.environ.get("TANDEM_CMAKE_BUILD_DIR")
        build_dir = Path(reuse) if reuse else Path(self.build_temp).resolve() / "cmake"
        if reuse and (build_dir / "CMakeCache.txt").exists():
            # A configured tree is the caller's: build in it, never reconfigure it
            # (that would point its cache at this, perhaps temporary, interpreter).
            pass
        else:
            build_dir.mkdir(parents=True, exist_ok=True)
            configure = ["cmake", "-S", str(REPO), "-B", str(build_dir),
                         f"-DPython_EXECUTABLE={sys.executable}", "-DTANDEM_BUILD_PYTHON=ON",
                         "-DCMAKE_BUILD_TYPE=Release", "-DTANDEM_BUILD_TESTS=OFF",
                         "-DTANDEM_BUILD_BENCH=OFF"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            _step(f"configuring tandem with CMake in {build_dir}")
            subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        _step(f"building tandem's Python module and command in {build_dir} ({jobs} jobs; "
              "a few minutes from scratch)")
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "tandem_python",
                        "tandem_cli", "--parallel", jobs], check=True)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = glob.glob(str(build_dir / "python" / "tandem" / f"_core{suffix}"))
        if len(built) != 1:
            raise RuntimeError(f"no _core{suffix} (this interpreter's module) in "
                               f"{build_dir}/python/tandem: is pybind11-dev installed, and was "
                               "the tree configured for this Python version?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)
        # The torch.distributed backend, built when CMake found LibTorch
        # (docs/pytorch-backend.md); the package works without it.
        for backend in glob.glob(str(build_dir / "python" / "tandem" / f"_c10d{suffix}")):
            shutil.copy2(backend, target.parent / Path(backend).name)
            _step(f"copied {backend} (the torch.distributed backend) into the package")
        # The `tandem` command, which the console script runs (tandem/_cli.py).
        binary = build_dir / "bin" / "tandem"
        if not binary.is_file():
            raise RuntimeError(f"no tandem binary at {binary} after building target tandem_cli")
        (target.parent / "_bin").mkdir(exist_ok=True)
        shutil.copy2(binary, target.parent / "_bin" / "tandem")
        _step(f"copied {built[0]} and {binary} into the package")


def _step(text: str) -> None:
    print(f"tandem setup.py: {text}", flush=True)


def _version() -> str:
    """The project's version, from the top CMakeLists.txt's project() line."""
    match = re.search(r"project\(tandem VERSION ([0-9.]+)",
                      (REPO / "CMakeLists.txt").read_text(encoding="utf-8"))
    if match is None:
        raise RuntimeError(f"no 'project(tandem VERSION x.y.z' in {REPO / 'CMakeLists.txt'}")
    return match.group(1)


setup(
    name="tandem",
    version=_version(),
    description="tandem's parameter server and collectives for NumPy and PyTorch",
    packages=["tandem"],
    package_dir={"tandem": "tandem"},
    ext_modules=[Extension("tandem._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["tandem = tandem._cli:main"]},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
