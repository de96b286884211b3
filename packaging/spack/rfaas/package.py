# Spack recipe for rFaaS. Copy this directory into a Spack repository
# (`spack repo create myrepo && cp -r packaging/spack/rfaas myrepo/packages/`,
# then `spack repo add myrepo`) and install with, for example:
#
#   spack install rfaas backend=libfabric +python
#   spack install --test=root rfaas +tests      # builds and runs the suite (check())
#
# Every variant is one CMake option of the project, and nothing else
# (docs/packages.md, "Spack"): backend -> RFAAS_NETWORK_BACKEND,
# python -> RFAAS_BUILD_PYTHON, tests -> RFAAS_BUILD_TESTS.

from spack.package import *

try:
    # Spack 1.0 and later keep the build systems in the builtin repository.
    from spack_repo.builtin.build_systems.cmake import CMakePackage
except ImportError:
    # Earlier releases export them from spack.package (imported above).
    pass


class Rfaas(CMakePackage):
    """rFaaS: serverless functions for HPC over RDMA networks. An application
    leases cores on remote executor servers, ships a library of functions once,
    and invokes them by writing the input straight into a busy-polling worker's
    memory, over libfabric (verbs, efa, tcp, shm, ...) or ibverbs + librdmacm."""

    homepage = "https://github.com/spcl/rFaaS"
    git = "https://github.com/spcl/rFaaS.git"

    version("main", branch="main")

    variant(
        "backend",
        default="libfabric",
        values=("libfabric", "verbs"),
        multi=False,
        description="Network backend of rdmalib: libfabric (any OFI provider) "
        "or verbs (ibverbs + librdmacm: InfiniBand, RoCE)",
    )
    variant("python", default=False, description="Build and install the Python module rfaas")
    variant("tests", default=False, description="Build the test suites; check() runs them")

    depends_on("cmake@3.18:", type="build")
    depends_on("pkgconfig", type="build")

    # The network backends. libfabric 1.17 is the oldest release the provider
    # quirks were checked against (rdmalib/libfabric/provider_table.hpp);
    # rdma-core 44 the oldest the verbs backend ran on (soft-RoCE VM).
    depends_on("libfabric@1.17:", when="backend=libfabric")
    depends_on("rdma-core@44:", when="backend=verbs")

    depends_on("spdlog@1.10:")
    depends_on("cxxopts@3:")
    depends_on("pistache@0.0.5:")
    depends_on("readerwriterqueue@1.0.6:")
    depends_on("nlohmann-json@3.11:")
    # The resource manager: lease tokens are MACs (libsodium), its store SQLite.
    depends_on("libsodium@1.0.18:")
    depends_on("sqlite@3.40:")
    # Clients' identity: librfaas encodes MUNGE credentials, the resource
    # manager decodes them.
    depends_on("munge")

    depends_on("googletest@1.12:", type=("build", "link"), when="+tests")
    # The test suites check the REST API with curl.
    depends_on("curl", type="test", when="+tests")

    extends("python", when="+python")
    depends_on("python@3.9:", type=("build", "link", "run"), when="+python")
    depends_on("py-pybind11@2.10:", type="build", when="+python")
    depends_on("py-numpy", type="test", when="+python +tests")

    # Linux only: executors are confined with Linux resource limits and CPU
    # affinity, and the shm provider's regions live in /dev/shm.
    conflicts("platform=darwin", msg="rFaaS runs on Linux only")
    conflicts("platform=windows", msg="rFaaS runs on Linux only")

    sanity_check_is_file = [
        "bin/executor_manager",
        "bin/resource_manager",
        "bin/rfaas-info",
        "libexec/rfaas/executor",
    ]
    sanity_check_is_dir = ["include/rfaas", "include/rdmalib", "share/rfaas"]

    def cmake_args(self):
        return [
            self.define_from_variant("RFAAS_NETWORK_BACKEND", "backend"),
            self.define_from_variant("RFAAS_BUILD_PYTHON", "python"),
            self.define_from_variant("RFAAS_BUILD_TESTS", "tests"),
            # Not a variant: the benchmarks need google-benchmark and are run
            # from a build tree (benchmarks/README.md), never installed.
            self.define("RFAAS_BUILD_BENCHMARKS", False),
            # A new compiler's new warning must not break a user's install.
            self.define("RFAAS_WERROR", False),
        ]

    def check(self):
        """`spack install --test=root rfaas +tests`: the project's test suite.
        install.deb builds and installs Debian packages with dpkg (as root),
        which is not what a Spack build may do to its machine."""
        if self.spec.satisfies("~tests"):
            return
        with working_dir(self.build_directory):
            ctest = which("ctest")
            ctest("--output-on-failure", "--timeout", "600", "-E", "^install\\.deb$")

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_installed_binaries(self):
        """The installed binaries start and report the backend they were built for."""
        info = Executable(join_path(self.prefix.bin, "rfaas-info"))
        out = info("--version", output=str, error=str)
        backend = self.spec.variants["backend"].value
        if backend not in out:
            raise InstallError("rfaas-info --version does not name the backend {0}: {1}".format(backend, out))
        Executable(join_path(self.prefix.bin, "executor_manager"))("--version", output=str, error=str)
