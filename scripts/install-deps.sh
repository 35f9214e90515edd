#!/usr/bin/env bash
# Installs everything tandem needs to build, test and lint, from Debian 12's
# packages only. Idempotent and non-interactive: when every package is already
# installed it changes nothing and returns in well under a second.
#
# Usage: scripts/install-deps.sh [--build | --runtime] [--list]   (as root, or with sudo)
#   (no mode)  PACKAGES: build, test, lint, benchmark and the bed (a developer's
#              machine, CI)
#   --build    BUILD_PACKAGES only: what `scripts/build.sh BUILD_DIR
#              -DTANDEM_BUILD_BENCH=OFF` needs (deploy/Dockerfile's build stage)
#   --runtime  RUNTIME_PACKAGES only: what the built programs, the Python package
#              and deploy/examples/ need to run (deploy/Dockerfile's runtime stage)
#   --list     print the chosen packages, one a line, and install nothing
#              (tests/system/test_dockerfile.py reads the stages' sets this way)
set -euo pipefail

MODE=all
LIST=0
for arg in "$@"; do
  case "$arg" in
    --build) MODE=build ;;
    --runtime) MODE=runtime ;;
    --list) LIST=1 ;;
    *)
      echo "install-deps: unknown argument '$arg' (use --build, --runtime, --list)" >&2
      exit 2
      ;;
  esac
done

# One package per line, with what needs it. Keep to what the tree uses now.
PACKAGES=(
  cmake               # the build
  make                # cmake's fallback generator
  ninja-build         # the preferred generator (scripts/build.sh uses it when present)
  g++                 # the compiler of the normal build (g++ 12)
  libgtest-dev        # unit tests
  libgmock-dev        # unit tests (mocks)
  libbenchmark-dev    # bench/
  libcli11-dev        # the `tandem` command line
  nlohmann-json3-dev  # JSON (node tables, bench output)
  libfmt-dev          # formatting and logging
  libssl-dev          # HMAC-SHA256 of the handshake, TLS (TANDEM_TLS=1) (OpenSSL)
  openssl             # tests/system/test_tls_launch.py makes its certificates with it
  prometheus-cpp-dev  # the opt-in /metrics endpoint (src/metrics/)
  prometheus          # promtool, which checks the metrics text in the tests
  clang-14            # sanitizer and libFuzzer builds
  libclang-rt-14-dev  # clang's ASan/UBSan/libFuzzer runtimes
  llvm-14             # llvm-symbolizer: source lines in sanitizer and fuzzer reports
  clang-16            # the ThreadSanitizer build (TSan 14 stalls after its clock reset:
  libclang-rt-16-dev  #   google/sanitizers#1552, fixed in LLVM 15); its runtime
  llvm-16             #   and symbolizer
  clang-format        # scripts/lint.sh
  clang-tidy          # scripts/lint.sh
  python3-pytest      # system tests, run by Debian's /usr/bin/python3
  python3-dev         # the Python package's extension module (python/)
  pybind11-dev        # the Python bindings (python/src/)
  python3-numpy       # the Python package: NumPy arrays as tensors; its tests
  python3-venv        # the Python package installed into a virtual environment (docs/python.md)
  python3-pip         # pip install / pip wheel ./python
  python3-wheel       # pip wheel ./python: the offline wheel
  python3-torch       # tandem.torch, examples/pytorch_ddp and their tests
  python3-jsonschema  # tests/system/test_k8s_render.py: manifests against the CRD schemas
  python3-kubernetes  # tests/system/test_k8s_render.py: core objects against the API types
  python3-yaml        # tests/system/test_k8s_render.py: reading CRDs and rendered YAML
  iproute2            # ip netns / tc for the multi-host bed
  nftables            # packet loss on the bed's bridge
  ethtool             # offloads off on the bed's veths
  procps              # ps and sysctl, to inspect a bed and a job
  libgloo-dev         # bench/peers: Gloo's allreduce, the collectives' peer
  libopenmpi-dev      # bench/peers: MPI_Allreduce and friends, the other peer
  openmpi-bin         # mpirun, to run the MPI peer
  libpmix-dev         # the PMIx start-up contract (src/cluster/pmix_client.cc): zero-config mpirun and srun --mpi=pmix
  pkg-config          # CMake finds libpmix through it
  libtorch-dev        # examples/fashion_mnist: the main job's model (LibTorch)
  dataset-fashion-mnist  # examples/fashion_mnist: the main job's data (IDX files)
  zlib1g-dev          # examples/fashion_mnist: reading the gzipped IDX files
  openssh-server      # tests/system/test_launch_ssh.py: sshd on the bed's hosts
  openssh-client      # tandem launch --launcher ssh
  rsync               # tandem launch --launcher ssh --sync-dst-dir
  slurm-wlm           # tests/system/test_launch_slurm.py: a one-node Slurm (srun, slurmctld, slurmd)
  munge               # Slurm's authentication
  gridengine-master   # tests/system/test_launch_sge.py: a one-machine Grid Engine cell (sge_qmaster)
  gridengine-exec     # sge_execd, sge_shepherd for that cell
  gridengine-client   # qsub, qrsh, qconf, qstat: tandem launch --launcher sge
)

# Grid Engine's packages would configure a cell named "default" (init_cluster
# in gridengine-master's postinst, an act_qmaster file) and start sge_qmaster
# and sge_execd through their init scripts. Nothing here uses that cell (the
# test makes its own in a temporary directory), and daemons left running
# would hold ports and outlive the installation. So: debconf is told not to
# configure a cell, and gridengine-common (which writes
# /etc/default/gridengine) goes first, so that the init scripts the other
# packages run at once find SGE_START_MASTERD=no and SGE_START_EXECD=no and
# start nothing.
GRIDENGINE_DEBCONF="gridengine-common shared/gridengineconfig boolean false"

# The subset of PACKAGES that the build alone needs: every find_package and
# pkg_check_modules of the CMakeLists with benchmarks off (bench/peers' Gloo
# and MPI are left out); tests/system/test_dockerfile.py maps each one to
# its Debian package with dpkg -S and checks it is here.
BUILD_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libcli11-dev nlohmann-json3-dev libfmt-dev libssl-dev prometheus-cpp-dev libpmix-dev
  libgtest-dev libgmock-dev    # the test programs (cluster_check, ...) are built with the tests
  python3-dev pybind11-dev     # the Python package's tandem._core
  libtorch-dev zlib1g-dev      # examples/fashion_mnist
)

# What the built programs run on, none of it a -dev package: the shared
# libraries `tandem`, the test programs and tandem._core link (the test maps
# `ldd`'s paths to packages with dpkg -S), the interpreter with NumPy and
# torch for the Python package and examples/pytorch_ddp, and what an MPIJob's
# pods run (mpirun, sshd).
RUNTIME_PACKAGES=(
  libfmt9 libssl3 libprometheus-cpp-pull1.0 libprometheus-cpp-core1.0 libpmix2
  libstdc++6 zlib1g
  python3 python3-numpy python3-torch
  openmpi-bin openssh-server openssh-client ca-certificates
)

case "$MODE" in
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  runtime) PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
esac
if [[ $LIST -eq 1 ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=600)
"${SUDO[@]}" apt-get -q -o DPkg::Lock::Timeout=600 update
if [[ " ${missing[*]} " == *" gridengine-"* ]]; then
  echo "$GRIDENGINE_DEBCONF" | "${SUDO[@]}" debconf-set-selections
  "${SUDO[@]}" apt-get install "${APT_OPTS[@]}" gridengine-common
  # Without the file (removed by hand) the init scripts start nothing either.
  if [[ -f /etc/default/gridengine ]]; then
    "${SUDO[@]}" sed -i -e 's/^SGE_START_MASTERD=.*/SGE_START_MASTERD=no/' \
      -e 's/^SGE_START_EXECD=.*/SGE_START_EXECD=no/' /etc/default/gridengine
  fi
fi
"${SUDO[@]}" apt-get install "${APT_OPTS[@]}" "${missing[@]}"
echo "install-deps: done"
