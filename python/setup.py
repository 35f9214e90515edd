"""pip's entry to the tandem Python package: builds tandem._core with the
repository's CMake build (target tandem_python) and installs it with the
package's Python files. Offline, with Debian's packages (no pyproject.toml,
so pip builds in place without an isolated environment to download into):

    /usr/bin/python3 -m pip install ./python            # from the repository root
    TANDEM_CMAKE_BUILD_DIR=$PWD/build /usr/bin/python3 -m pip install ./python
                                     # reuse an existing build tree (no rebuild of tandem)

Debian's interpreter is "externally managed": install into a virtual
environment (python3 -m venv --system-site-packages ENV; ENV/bin/pip install
./python) or pass --break-system-packages. docs/python.md.
"""

from __future__ import annotations

import glob
import os
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
    interpreter) and builds the one target that makes tandem._core."""

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
            subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "tandem_python",
                        "--parallel", jobs], check=True)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = glob.glob(str(build_dir / "python" / "tandem" / f"_core{suffix}"))
        if len(built) != 1:
            raise RuntimeError(f"no _core{suffix} (this interpreter's module) in "
                               f"{build_dir}/python/tandem: is pybind11-dev installed, and was "
                               "the tree configured for this Python version?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)


setup(
    name="tandem",
    version="0.1.0",
    description="tandem's parameter server and collectives for NumPy and PyTorch",
    packages=["tandem"],
    package_dir={"tandem": "tandem"},
    ext_modules=[Extension("tandem._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
