#!/usr/bin/env bash
# Install every Debian package that rFaaS needs to build, test (including the
# soft-RoCE VM runner of the verbs backend) and benchmark. Debian 12.
#
# Usage: scripts/install-deps.sh           install what is missing
#        scripts/install-deps.sh --check   only report what is missing (exit 1 if any)
#        scripts/install-deps.sh --list    print the package list
#
# Idempotent and non-interactive: when every package is already installed it
# does nothing (no apt-get update, no network). Needs root (or sudo) only when
# something is missing. Nothing else is ever downloaded.
set -euo pipefail

packages=(
  # build
  cmake ninja-build make g++ pkg-config
  # network backends: libfabric, ibverbs + rdmacm
  libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
  # libraries
  libspdlog-dev libcxxopts-dev libpistache-dev libreaderwriterqueue-dev nlohmann-json3-dev
  # resource manager: lease tokens (MACs), its SQLite store; curl for its REST tests,
  # sqlite3 for the tests that prepare a database behind its back
  libsodium-dev libsqlite3-dev curl sqlite3
  # clients' identity: librfaas encodes MUNGE credentials, the resource manager decodes them
  libmunge-dev
  # executors' sandbox: seccomp filters; the oci kind and its tests (podman
  # with runc: crun refuses hybrid cgroup hierarchies)
  libseccomp-dev podman runc
  # tests and benchmarks; gdb: a test that times out prints the stacks of what hung;
  # strace: server.pool.*.midconnect holds an executor in the middle of its connect
  libgtest-dev libbenchmark-dev gdb strace
  # the Python module (rfaas/python/) for Debian's python3, and its tests
  python3-dev python3-pybind11 pybind11-dev python3-numpy python3-pytest
  # benchmarks/plot.py (its figures and their smoke test)
  python3-matplotlib
  # soft-RoCE VM runner (verbs backend tests) and network namespaces
  qemu-system-x86 busybox-static kmod cpio xz-utils iproute2
  # API reference (the docs target: doxygen, its graphs with graphviz);
  # Debian packages (cpack -G DEB: dpkg-shlibdeps; adduser for their postinst)
  doxygen graphviz dpkg-dev adduser
  # format check, sanitizer runtime for clang builds
  clang-format libclang-rt-14-dev
  # fuzz targets (scripts/fuzz.sh: clang with libFuzzer)
  clang-14
  # a real SLURM cluster on this host for the slurm tests (tests/slurm/), MUNGE its identity
  slurmctld slurmd slurm-client munge
)

mode=install
case ${1:-} in
  "") ;;
  --check) mode=check ;;
  --list)
    printf '%s\n' "${packages[@]}"
    exit 0
    ;;
  -h | --help)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "install-deps.sh: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
esac

installed() {
  # "ii " = installed and configured; anything else (absent, half-installed,
  # config-files only) needs apt-get.
  [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) == "ii " ]]
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: this script needs a Debian system (dpkg and apt-get); install by hand:" >&2
  printf '  %s\n' "${packages[@]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps.sh: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps.sh: missing ${#missing[@]} of ${#packages[@]} packages: ${missing[*]}"
if [[ $mode == check ]]; then
  exit 1
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps.sh: not root and no sudo; as root run:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# Wait for a concurrent apt/dpkg instead of failing on its lock; retry flaky
# downloads.
apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)

"${sudo[@]}" apt-get "${apt_opts[@]}" update -q
"${sudo[@]}" apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${missing[@]}"

still=()
for p in "${missing[@]}"; do
  installed "$p" || still+=("$p")
done
if [[ ${#still[@]} -gt 0 ]]; then
  echo "install-deps.sh: apt-get finished but these are still not installed: ${still[*]}" >&2
  exit 1
fi
echo "install-deps.sh: installed ${missing[*]}"
