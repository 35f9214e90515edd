"""deploy/Dockerfile checked without a container runtime (none runs in CI):

(a) the build stage installs, through scripts/install-deps.sh --build, the
    Debian package behind every find_package and pkg_check_modules of the
    CMakeLists the image's configuration reaches; the mapping is proven on
    this machine with `dpkg -S` on the file that satisfies each lookup, and
    cross-checked with the path this build's CMakeCache.txt recorded;
(b) every COPY source exists in the build context (and is not dropped by
    Dockerfile.dockerignore), and every program and path that CMD and the
    manifests rendered from deploy/examples/* run exists in the final image,
    whose files are modelled from its COPY lines and the packages it installs;
(c) the runtime stage holds the package of every shared library that `ldd`
    finds for the binaries it copies from the build stage.

The build stage's /build is this machine's build tree (TANDEM_BIN_DIR/..):
checks of built files need it configured as the image's is (no sanitizer)."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

import debian_packages
import dockerfile_model

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
INSTALL_DEPS = ROOT / "scripts" / "install-deps.sh"
STAGES = dockerfile_model.parse(DOCKERFILE)
BUILD, RUNTIME = STAGES[0], STAGES[-1]
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# What satisfies each CMake lookup on Debian 12: files whose owner
# (`dpkg -S`) must be installed by the build stage, and the CMakeCache entry
# that records what this build found, whose owner must be installed as well.
PROBES = {
    "Threads": (["/usr/include/pthread.h"], None),
    "fmt": (["/usr/lib/*/cmake/fmt/fmt-config.cmake"], "fmt_DIR"),
    "OpenSSL": (["/usr/include/openssl/ssl.h", "/usr/lib/*/libssl.so"], "OPENSSL_SSL_LIBRARY"),
    "CLI11": (["/usr/share/cmake/CLI11/CLI11Config.cmake"], "CLI11_DIR"),
    "nlohmann_json": (["/usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake"],
                      "nlohmann_json_DIR"),
    "prometheus-cpp": (["/usr/lib/*/cmake/prometheus-cpp/prometheus-cpp-config.cmake"],
                       "prometheus-cpp_DIR"),
    "PkgConfig": (["/usr/bin/pkg-config"], "PKG_CONFIG_EXECUTABLE"),
    "pmix": (["/usr/lib/*/pkgconfig/pmix.pc"], "pkgcfg_lib_PMIX_pmix"),
    # pybind11 with PYBIND11_FINDPYTHON: FindPython's Development component too.
    "pybind11": (["/usr/lib/cmake/pybind11/pybind11Config.cmake",
                  "/usr/include/python3.*/Python.h"], "pybind11_DIR"),
    # The unit tests link GTest::gmock as well.
    "GTest": (["/usr/lib/*/cmake/GTest/GTestConfig.cmake", "/usr/include/gmock/gmock.h"],
              "GTest_DIR"),
    "ZLIB": (["/usr/include/zlib.h", "/usr/lib/*/libz.so"], "ZLIB_LIBRARY_RELEASE"),
    "Torch": (["/usr/lib/*/cmake/Torch/TorchConfig.cmake"], "Torch_DIR"),
}
# The tools scripts/build.sh runs.
TOOLS = {"cmake": "/usr/bin/cmake", "ninja": "/usr/bin/ninja", "c++": "/usr/bin/g++"}


# ---- the Dockerfile's own facts ---------------------------------------------------------

def install_deps_list(mode: str | None) -> set[str]:
    args = [str(INSTALL_DEPS)] + ([f"--{mode}"] if mode else []) + ["--list"]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=30).stdout
    return set(out.split())


def stage_packages(stage: dockerfile_model.Stage) -> set[str]:
    """What a stage's RUN lines install: install-deps.sh's set for its mode,
    plus any `apt-get install` arguments."""
    out: set[str] = set()
    for run in stage.runs():
        for command in re.split(r"&&|\|\||;", run):
            words = command.split()
            if words and words[0].endswith("/install-deps.sh"):
                modes = [w[2:] for w in words[1:] if w in ("--build", "--runtime")]
                out |= install_deps_list(modes[-1] if modes else None)
            elif words[:2] == ["apt-get", "install"]:
                out |= {w for w in words[2:] if not w.startswith("-")}
    return out


def configure_options() -> dict[str, bool]:
    """Every option() of the CMakeLists with its default, then the -D
    settings of the build stage's scripts/build.sh line."""
    options = {}
    for path in ROOT.glob("**/CMakeLists.txt"):
        if path.relative_to(ROOT).parts[0].startswith("build"):
            continue
        for name, value in re.findall(r'option\((\w+)\s+"[^"]*"\s+(ON|OFF)\)', path.read_text()):
            options[name] = value == "ON"
    for run in BUILD.runs():
        if "scripts/build.sh" in run:
            for name, value in re.findall(r"-D(\w+)=(\w+)", run):
                options[name] = value.upper() in ("ON", "1", "TRUE", "YES")
    return options


def condition(text: str, options: dict[str, bool]) -> bool:
    """An if() condition of option names, NOT, AND and OR; anything else
    counts as true (a lookup under it is then required, the safe side)."""
    words = text.split()
    if not all(re.fullmatch(r"\w+", w) for w in words):
        return True
    expr = []
    for w in words:
        if w in ("NOT", "AND", "OR"):
            expr.append(w.lower())
        elif w in options:
            expr.append(str(options[w]))
        else:
            return True
    return bool(eval(" ".join(expr), {"__builtins__": {}}))  # only True/False/and/or/not


def cmake_lookups() -> dict[str, str]:
    """find_package names and pkg_check_modules modules of the CMakeLists
    the image's configuration reaches from the root (add_subdirectory under
    a true condition), each with the file and line that asks for it."""
    options = configure_options()
    found: dict[str, str] = {}
    pending = [ROOT / "CMakeLists.txt"]
    while pending:
        path = pending.pop()
        taken: list[bool] = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0].strip()
            if m := re.match(r"if\s*\((.*)\)\s*$", code):
                taken.append(condition(m[1], options))
            elif re.match(r"elseif\s*\(", code) and taken:
                taken[-1] = True
            elif re.match(r"else\s*\(", code) and taken:
                taken[-1] = not taken[-1]
            elif re.match(r"endif\s*\(", code) and taken:
                taken.pop()
            elif not all(taken):
                continue
            elif m := re.match(r"add_subdirectory\s*\(\s*([\w/.${}]+)", code):
                sub = m[1].replace("${CMAKE_CURRENT_SOURCE_DIR}/", "")
                pending.append(path.parent / sub / "CMakeLists.txt")
            elif m := re.match(r"find_package\s*\(\s*([\w-]+)", code):
                found.setdefault(m[1], f"{path.relative_to(ROOT)}:{n}")
            elif m := re.match(r"pkg_check_modules\s*\(\s*\w+\s+(?:IMPORTED_TARGET\s+)?(\w+)", code):
                found.setdefault(m[1], f"{path.relative_to(ROOT)}:{n}")
    return found


LOOKUPS = cmake_lookups()


def build_dir(bin_dir: Path) -> Path:
    return bin_dir.parent


def cmake_cache(bin_dir: Path) -> dict[str, str]:
    path = build_dir(bin_dir) / "CMakeCache.txt"
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if m := re.match(r"([\w.+-]+):\w+=(.*)$", line):
                out[m[1]] = m[2]
    return out


def needs_image_like_build(bin_dir: Path) -> None:
    cache = cmake_cache(bin_dir)
    for option in ("TANDEM_SANITIZE", "TANDEM_FUZZ", "TANDEM_TSAN"):
        if cache.get(option, "OFF").upper() in ("ON", "1", "TRUE"):
            pytest.skip(f"{build_dir(bin_dir)} is built with {option}; the image's build is not")


# ---- (a) the build stage ----------------------------------------------------------------

def test_every_stage_starts_from_debian_12():
    names = {s.name for s in STAGES if s.name}
    for s in STAGES:
        assert s.base in ("debian:12", "debian:bookworm") or s.base in names, s.base
    assert BUILD.name == "build" and RUNTIME.name is None


def test_stages_use_the_projects_scripts():
    build_runs = " ".join(BUILD.runs())
    assert "install-deps.sh --build" in build_runs
    assert re.search(r"scripts/build\.sh /build\b", build_runs), build_runs
    assert "install-deps.sh --runtime" in " ".join(RUNTIME.runs())
    # The script is copied in before the RUN that needs it.
    for s in STAGES:
        keywords = [(i.keyword, i.text) for i in s.instructions]
        first_copy = next(n for n, (k, t) in enumerate(keywords)
                          if k == "COPY" and "install-deps.sh" in t)
        first_run = next(n for n, (k, t) in enumerate(keywords) if k == "RUN")
        assert first_copy < first_run


def test_build_packages_are_the_developers_packages():
    """--build is a subset of what a developer's machine gets, so the image
    builds with nothing the tree's own CI does not also build with."""
    assert install_deps_list("build") <= install_deps_list(None)
    assert install_deps_list("build") == stage_packages(BUILD)


def test_lookups_are_found():
    # The derivation itself: the lookups the root CMakeLists makes, and no
    # benchmark peers (the image configures with TANDEM_BUILD_BENCH=OFF).
    assert {"fmt", "OpenSSL", "CLI11", "nlohmann_json", "prometheus-cpp", "pmix", "pybind11",
            "GTest", "ZLIB", "Torch"} <= set(LOOKUPS), LOOKUPS
    assert "Gloo" not in LOOKUPS and "MPI" not in LOOKUPS, LOOKUPS
    assert not configure_options()["TANDEM_BUILD_BENCH"]


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_build_stage_installs_what_cmake_looks_up(tandem_bin_dir, name):
    assert name in PROBES, (f"{LOOKUPS[name]} looks up {name}: add the file that satisfies "
                            "it on Debian to PROBES, and its package to install-deps.sh --build")
    patterns, cache_key = PROBES[name]
    have = debian_packages.closure(stage_packages(BUILD))
    for pattern in patterns:
        paths = sorted(glob.glob(pattern))
        assert paths, f"{pattern} (for {name}) matches nothing on this machine"
        package = debian_packages.owner(paths[0])
        assert package in have, (f"{name} ({LOOKUPS[name]}) needs {paths[0]} from {package}, "
                                 "which the build stage does not install")
    value = cmake_cache(tandem_bin_dir).get(cache_key or "", "")
    if value and "NOTFOUND" not in value:
        found = Path(value)
        if found.is_dir():
            found = sorted(found.glob("*onfig.cmake"))[0]
        package = debian_packages.owner(str(found))
        assert package in have, f"this build found {name} in {value}, from {package}"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_build_stage_installs_the_tools(tool):
    package = debian_packages.owner(TOOLS[tool])
    assert package in debian_packages.closure(stage_packages(BUILD)), (tool, package)


# ---- (b) paths copied and paths run -----------------------------------------------------

COPIES = [(n, c) for n, s in enumerate(STAGES) for c in s.copies()]


@pytest.mark.parametrize("index", range(len(COPIES)),
                         ids=[f"line{c.line}" for _, c in COPIES])
def test_copy_sources_exist(tandem_bin_dir, index):
    _, copy = COPIES[index]
    if copy.stage is None:
        patterns = dockerfile_model.ignore_patterns(IGNORE)
        for source in copy.sources:
            assert (ROOT / source).exists(), f"line {copy.line}: {source} is not in the tree"
            if source != ".":
                assert not dockerfile_model.ignored(source, patterns), (
                    f"line {copy.line}: {source} is excluded by {IGNORE.name}")
        return
    assert copy.stage == BUILD.name, f"line {copy.line}: --from={copy.stage}"
    needs_image_like_build(tandem_bin_dir)
    for source in copy.sources:
        assert source.startswith("/build/"), f"line {copy.line}: {source} is not a build output"
    dockerfile_model.copied_files(copy, build_dir(tandem_bin_dir), "/build")


def image_files(bin_dir: Path) -> dict[str, Path | None]:
    """Image path -> local file (COPY) or None (from a package)."""
    files: dict[str, Path | None] = {}
    packages = debian_packages.closure(stage_packages(RUNTIME)) | \
        debian_packages.base_image_packages()
    for path in debian_packages.files_of(packages):
        files[path] = None
    # update-alternatives links (/usr/bin/mpirun -> /etc/alternatives/mpirun
    # -> mpirun.openmpi) are made by the packages' install scripts, not
    # listed by dpkg: a link of this machine counts where its target does.
    for directory in image_path():
        for link in Path(directory).glob("*"):
            if link.is_symlink() and os.readlink(link).startswith("/etc/alternatives/") \
                    and os.path.realpath(link) in files:
                files[str(link)] = None
    for copy in RUNTIME.copies():
        if copy.stage is None:
            files.update(dockerfile_model.copied_files(copy, ROOT))
        else:
            files.update(dockerfile_model.copied_files(copy, build_dir(bin_dir), "/build"))
    return files


def image_path() -> list[str]:
    value = RUNTIME.env().get("PATH", DEFAULT_PATH).replace("$PATH", DEFAULT_PATH)
    return value.split(":")


def resolve(program: str, files: dict) -> str | None:
    if program.startswith("/"):
        return program if program in files else None
    return next((f"{d}/{program}" for d in image_path() if f"{d}/{program}" in files), None)


@pytest.fixture(scope="module")
def files(tandem_bin_dir):
    needs_image_like_build(tandem_bin_dir)
    return image_files(tandem_bin_dir)


def test_cmd_runs_a_program_in_the_image(files):
    for keyword in ("ENTRYPOINT", "CMD"):
        instruction = RUNTIME.last(keyword)
        if instruction is not None:
            argv = instruction.exec_form()
            assert resolve(argv[0], files), f"{keyword} runs {argv[0]}, not in the image"
    workdir = RUNTIME.last("WORKDIR")
    assert workdir is None or any(f.startswith(workdir.text + "/") for f in files)


def containers(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers":
                yield from value
            else:
                yield from containers(value)
    elif isinstance(node, list):
        for v in node:
            yield from containers(v)


def rendered_commands(bin_dir: Path, description: Path) -> list[tuple[str, list[str]]]:
    """(kind, container argv) of every container every kind renders."""
    out = []
    for kind in ("mxjob", "pytorchjob", "mpijob", "trainjob", "jobset", "indexed-job",
                 "volcano-job"):
        result = subprocess.run([str(bin_dir / "tandem"), "k8s", "render", "-f",
                                 str(description), "--kind", kind],
                                capture_output=True, text=True, timeout=30)
        if result.returncode == 78 and (f"kind {kind} runs" in result.stderr or
                                        "needs kind pytorchjob" in result.stderr):
            continue  # a kind that refuses this strategy, or an elastic job
        assert result.returncode == 0, result.stderr
        for obj in yaml.safe_load_all(result.stdout):
            for c in containers(obj or {}):
                out.append((kind, c["command"] + c.get("args", [])))
    return out


def python_imports(script: Path) -> set[str]:
    """Top-level modules a script imports at its top level."""
    names = set()
    for line in script.read_text().splitlines():
        if m := re.match(r"(?:import|from)\s+([\w]+)", line):
            names.add(m[1])
    return names


def importable(module: str, files: dict, script: str) -> bool:
    """Whether `module` is in the image for `script`: the standard library,
    the site directories, or beside the script (the first entry of
    sys.path when Python runs a script)."""
    if module in sys.stdlib_module_names:
        return True
    site = ["/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages",
            str(Path(script).parent)]
    return any(f"{d}/{module}/__init__.py" in files or f"{d}/{module}.py" in files
               for d in site)


EXAMPLES = sorted(p.name for p in (ROOT / "deploy" / "examples").glob("*.json"))


@pytest.mark.parametrize("description", EXAMPLES)
def test_example_manifests_run_what_the_image_holds(tandem_bin_dir, files, description):
    path = ROOT / "deploy" / "examples" / description
    argvs = [("description", json.loads(path.read_text())["command"])]
    argvs += rendered_commands(tandem_bin_dir, path)
    assert len(argvs) > 1
    for kind, argv in argvs:
        assert resolve(argv[0], files), f"{description} ({kind}) runs {argv[0]}: not in the image"
        for arg in argv[1:]:
            if arg.startswith("/"):
                assert arg in files, f"{description} ({kind}) names {arg}: not in the image"
                if arg.endswith(".py"):
                    for module in python_imports(files[arg]):
                        assert importable(module, files, arg), f"{arg} imports {module}"


def test_python_package_fits_the_images_interpreter(files):
    package = "/usr/local/lib/python3.11/dist-packages/tandem"
    assert f"{package}/__init__.py" in files
    assert any(re.fullmatch(rf"{package}/_core\.cpython-311-[\w-]+\.so", f) for f in files)
    assert "/usr/bin/python3.11" in files


# ---- (c) the runtime stage's shared libraries ------------------------------------------

BUILT_COPIES = [c for c in RUNTIME.copies() if c.stage is not None]


@pytest.mark.parametrize("index", range(len(BUILT_COPIES)),
                         ids=[f"line{c.line}" for c in BUILT_COPIES])
def test_runtime_stage_holds_every_library_the_binaries_link(tandem_bin_dir, index):
    needs_image_like_build(tandem_bin_dir)
    copied = dockerfile_model.copied_files(BUILT_COPIES[index], build_dir(tandem_bin_dir),
                                           "/build")
    elves = {image: local for image, local in copied.items()
             if local.read_bytes()[:4] == b"\x7fELF"}
    assert elves, f"line {BUILT_COPIES[index].line} copies no binary"
    libraries: dict[str, list[str]] = {}
    for image, local in sorted(elves.items()):
        ldd = subprocess.run(["ldd", str(local)], capture_output=True, text=True, check=True,
                             timeout=60, env=dict(os.environ, LD_LIBRARY_PATH="")).stdout
        assert "not found" not in ldd, f"{image}:\n{ldd}"
        for lib in re.findall(r"=> (/\S+)", ldd):
            libraries.setdefault(lib, []).append(image)
    have = debian_packages.closure(stage_packages(RUNTIME)) | \
        debian_packages.base_image_packages()
    missing = {}
    for lib, package in debian_packages.owners(sorted(libraries)).items():
        if package not in have:
            missing.setdefault(package, []).append(
                f"{PurePosixPath(lib).name} (for {', '.join(libraries[lib])})")
    assert missing == {}, f"packages the runtime stage lacks: {missing}"
