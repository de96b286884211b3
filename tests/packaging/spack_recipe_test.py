"""The Spack recipe (packaging/spack/rfaas/package.py), checked without Spack.

1. It compiles, and loads against the stub of Spack's API in spack_stub/
   (`from spack.package import *`), which records its directives: as Spack
   1.x loads it (CMakePackage from spack_repo.builtin.build_systems.cmake) and
   as Spack 0.x does (no spack_repo), declaring the same package both ways.
2. Its variants are exactly backend=libfabric|verbs, python and tests, and each
   maps one-to-one to its CMake option: every combination passes each option
   exactly once, with the variant's value.
3. Its dependencies: libfabric only with backend=libfabric and rdma-core only
   with backend=verbs, both with a version range; the libraries the project
   finds (spdlog, cxxopts, pistache, readerwriterqueue, nlohmann-json,
   libsodium, sqlite, munge); googletest only with +tests.
4. check() runs ctest in the build directory (recorded, not run).
5. Every distinct CMake configuration the recipe can emit configures this
   source tree (cmake configure only, in a temporary directory), with no
   "Manually-specified variables were not used" warning: an option the recipe
   passes must be one the project reads.

Usage: /usr/bin/python3 spack_recipe_test.py SOURCE_DIR [CMAKE_GENERATOR]
Prints the CMake arguments of every combination.
"""

import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time

# Nothing may be written into the source tree (no __pycache__ beside the
# recipe or the stub).
sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "spack_stub"))

from spack import package as spack  # noqa: E402  (the stub)

failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def load_recipe(path, spack_1=True):
    """The recipe's package class, loaded as Spack 1.x loads it (CMakePackage
    from spack_repo.builtin.build_systems) or, with spack_1 False, as Spack 0.x
    does (no spack_repo: CMakePackage from spack.package)."""
    with open(path) as f:
        compile(f.read(), path, "exec")  # a syntax error names its line
    # Spack loads a recipe as a module of its repository's namespace.
    spec = importlib.util.spec_from_file_location("spack.pkg.builtin.rfaas", path)
    module = importlib.util.module_from_spec(spec)
    hidden = {}
    if not spack_1:
        for name in [m for m in sys.modules if m == "spack_repo" or m.startswith("spack_repo.")]:
            hidden[name] = sys.modules.pop(name)
        sys.modules["spack_repo"] = None  # "import spack_repo..." raises ImportError
    try:
        spec.loader.exec_module(module)
    finally:
        if not spack_1:
            del sys.modules["spack_repo"]
            sys.modules.update(hidden)
    classes = [c for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, spack.CMakePackage) and c is not spack.CMakePackage]
    if len(classes) != 1 or classes[0].__name__ != "Rfaas":
        raise SystemExit("FAIL: the recipe must define exactly one CMakePackage, Rfaas; found {0}".format(
            [c.__name__ for c in classes]))
    return classes[0]


# variant -> (CMake option, {variant value: CMake value})
MAPPING = {
    "backend": ("RFAAS_NETWORK_BACKEND", {"libfabric": "STRING=libfabric", "verbs": "STRING=verbs"}),
    "python": ("RFAAS_BUILD_PYTHON", {True: "BOOL=ON", False: "BOOL=OFF"}),
    "tests": ("RFAAS_BUILD_TESTS", {True: "BOOL=ON", False: "BOOL=OFF"}),
}
ALWAYS = ["spdlog", "cxxopts", "pistache", "readerwriterqueue", "nlohmann-json", "libsodium", "sqlite",
          "munge"]


def check_declarations(cls):
    if set(cls.variants) != set(MAPPING):
        fail("variants are {0}, expected {1}".format(sorted(cls.variants), sorted(MAPPING)))
    backend = cls.variants.get("backend")
    if backend and (set(backend.values) != {"libfabric", "verbs"} or backend.multi or
                    backend.default != "libfabric"):
        fail("backend must be single-valued libfabric|verbs, default libfabric")
    for name in ("python", "tests"):
        if name in cls.variants and not cls.variants[name].is_bool:
            fail("variant {0} must be boolean".format(name))
    if not cls.versions:
        fail("no version()")
    deps = {}
    for d in cls.dependencies:
        deps.setdefault(d.name, []).append(d)
    for name, when in (("libfabric", "backend=libfabric"), ("rdma-core", "backend=verbs")):
        if name not in deps:
            fail("no dependency on " + name)
            continue
        for d in deps[name]:
            if d.when != when:
                fail("{0} must depend on {1}, not '{2}'".format(name, when, d.when))
            if not d.versions or ":" not in d.versions:
                fail("{0} needs a version range (e.g. @1.17:), has '{1}'".format(name, d.versions))
    for name in ALWAYS:
        if not any(d.when is None for d in deps.get(name, [])):
            fail("no unconditional dependency on " + name)
    if not any(d.when == "+tests" for d in deps.get("googletest", [])):
        fail("googletest must be a dependency when +tests")
    if not any(c[0].startswith("platform=darwin") for c in cls.conflicts_list):
        fail("no conflict with macOS (rFaaS is Linux-only)")


def combinations(cls):
    names = sorted(cls.variants)
    values = [cls.variants[n].values if not cls.variants[n].is_bool else (False, True) for n in names]
    for combo in itertools.product(*values):
        yield dict(zip(names, combo))


def check_combination(cls, variants):
    pkg = cls(spack.Spec("rfaas", variants))
    args = pkg.cmake_args()
    label = " ".join(("+" if v else "~") + k if isinstance(v, bool) else "{0}={1}".format(k, v)
                     for k, v in sorted(variants.items()))
    print("{0:34} {1}".format(label, " ".join(args)))
    for variant, (option, values) in MAPPING.items():
        passed = [a for a in args if a.startswith("-D{0}:".format(option))]
        want = "-D{0}:{1}".format(option, values[variants[variant]])
        if passed != [want]:
            fail("{0}: expected exactly {1}, got {2}".format(label, want, passed))
    active = {d.name for d in pkg.active_dependencies()}
    if variants["backend"] == "libfabric" and ("libfabric" not in active or "rdma-core" in active):
        fail(label + ": libfabric, and not rdma-core, must be a dependency")
    if variants["backend"] == "verbs" and ("rdma-core" not in active or "libfabric" in active):
        fail(label + ": rdma-core, and not libfabric, must be a dependency")
    if ("googletest" in active) != variants["tests"]:
        fail(label + ": googletest must be a dependency exactly when +tests")
    if variants["python"] and "py-pybind11" not in active:
        fail(label + ": +python needs py-pybind11")
    if pkg.conflicting():
        fail(label + ": conflicts on linux: {0}".format(pkg.conflicting()))

    # check(): ctest in the build directory, only with +tests.
    spack.Executable.calls.clear()
    spack.Executable.dry_run = True
    with tempfile.TemporaryDirectory() as build:
        pkg.build_directory = build
        pkg.check()
        ran = [c for c in spack.Executable.calls if os.path.basename(c[0]) == "ctest"]
        if variants["tests"] and not (ran and os.path.realpath(ran[0][2]) == os.path.realpath(build)):
            fail(label + ": check() did not run ctest in the build directory: {0}".format(
                spack.Executable.calls))
        if not variants["tests"] and ran:
            fail(label + ": check() ran ctest without +tests")
    spack.Executable.dry_run = False
    return tuple(args)


def configure(source, generator, configs):
    """Configure the tree once per distinct argument list; returns seconds."""
    start = time.monotonic()
    work = tempfile.mkdtemp(prefix="rfaas-spack-configure.")
    try:
        for i, args in enumerate(sorted(configs)):
            build = os.path.join(work, str(i))
            # What Spack itself adds (std_cmake_args), reduced to the essentials.
            cmd = ["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                   "-DCMAKE_INSTALL_PREFIX=" + os.path.join(work, "prefix")] + list(args)
            if generator:
                cmd += ["-G", generator]
            t = time.monotonic()
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            secs = time.monotonic() - t
            if res.returncode != 0:
                fail("configuring with {0} failed:\n{1}".format(" ".join(args), res.stdout[-4000:]))
            elif "Manually-specified variables were not used" in res.stdout:
                fail("the project ignores an option the recipe passes ({0}):\n{1}".format(
                    " ".join(args), res.stdout[res.stdout.index("Manually-specified"):][:800]))
            else:
                print("configured in {0:.1f} s: {1}".format(secs, " ".join(args)))
            shutil.rmtree(build, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return time.monotonic() - start


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    source = os.path.abspath(sys.argv[1])
    generator = sys.argv[2] if len(sys.argv) > 2 else ""
    recipe = os.path.join(source, "packaging", "spack", "rfaas", "package.py")
    cls = load_recipe(recipe)
    if "spack_repo.builtin.build_systems.cmake" not in sys.modules:
        fail("the recipe does not take CMakePackage from spack_repo.builtin.build_systems.cmake "
             "(Spack 1.x)")
    # The same recipe under Spack 0.x's layout declares the same package.
    old = load_recipe(recipe, spack_1=False)
    if (sorted(old.variants) != sorted(cls.variants) or
            [(d.name, d.versions, d.when) for d in old.dependencies] !=
            [(d.name, d.versions, d.when) for d in cls.dependencies]):
        fail("the recipe declares another package when loaded as Spack 0.x loads it")
    check_declarations(cls)
    configs = set()
    count = 0
    for variants in combinations(cls):
        configs.add(check_combination(cls, variants))
        count += 1
    print("{0} variant combinations, {1} distinct CMake configurations".format(count, len(configs)))
    if failures:
        raise SystemExit("{0} failure(s) before configuring".format(len(failures)))
    secs = configure(source, generator, configs)
    if failures:
        raise SystemExit("{0} failure(s)".format(len(failures)))
    print("spack recipe test: ok ({0} configurations configured in {1:.0f} s)".format(len(configs), secs))


if __name__ == "__main__":
    main()
