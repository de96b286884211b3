"""The part of Spack's `spack.package` API that rFaaS's recipe uses, with the
same names, signatures and CMake argument format (Spack's
CMakeBuilder.define: "-DNAME:BOOL=ON", "-DNAME:STRING=value"), so that
tests/packaging/spack_recipe_test.py can load the recipe with a plain
Python, read its directives, instantiate it for any variant combination and
call cmake_args() and check().

Directives (version, variant, depends_on, conflicts, extends) are recorded
on the class being defined, as Spack's directive metaclass does: they run in
the class body before the class exists, so they queue up here and
CMakePackage.__init_subclass__ collects them. A `when=` condition is kept
as text and evaluated by Spec.satisfies() against the variants and the
platform only: what the recipe's conditions use. An unknown keyword or a
condition this stub cannot evaluate raises, so a recipe that would need
more of Spack than exists here fails loudly instead of passing untested.
"""

import contextlib
import os
import re
import shlex
import subprocess

__all__ = [
    "CMakePackage",
    "Executable",
    "InstallError",
    "Spec",
    "conflicts",
    "depends_on",
    "extends",
    "join_path",
    "on_package_attributes",
    "run_after",
    "variant",
    "version",
    "which",
    "working_dir",
]

_pending = []


class InstallError(Exception):
    pass


def _directive(kind, allowed):
    def record(*args, **kwargs):
        unknown = set(kwargs) - set(allowed)
        if unknown:
            raise TypeError("{0}(): unknown keyword(s) {1}".format(kind, sorted(unknown)))
        _pending.append((kind, args, kwargs))

    record.__name__ = kind
    return record


version = _directive("version", ["branch", "tag", "commit", "sha256", "preferred", "deprecated", "submodules"])
variant = _directive("variant", ["default", "description", "values", "multi", "when", "sticky"])
depends_on = _directive("depends_on", ["when", "type", "patches"])
conflicts = _directive("conflicts", ["when", "msg"])
extends = _directive("extends", ["when", "type"])

_DEP_TYPES = {"build", "link", "run", "test"}


class Variant:
    def __init__(self, name, default, description, values, multi):
        self.name = name
        self.default = default
        self.description = description
        self.values = tuple(values) if values is not None else (True, False)
        self.multi = multi

    @property
    def is_bool(self):
        return isinstance(self.default, bool)


class Dependency:
    """One depends_on: the package name, its version range ("1.17:") and
    condition ("backend=verbs", "+tests"; None = always)."""

    def __init__(self, spec, when, types):
        m = re.fullmatch(r"([a-z0-9][a-z0-9-]*)(?:@(\S+))?", spec)
        if not m:
            raise ValueError("depends_on: cannot read the spec '{0}'".format(spec))
        self.name, self.versions = m.group(1), m.group(2)
        self.when = when
        if isinstance(types, str):
            types = (types,)
        self.types = tuple(types or ("build", "link"))
        if not set(self.types) <= _DEP_TYPES:
            raise ValueError("depends_on('{0}'): unknown type in {1}".format(spec, self.types))


class VariantValue:
    def __init__(self, name, value):
        self.name, self.value = name, value


class Spec:
    """A concrete choice of variant values (and a platform) for one package."""

    def __init__(self, name, variants, platform="linux"):
        self.name = name
        self.variants = {k: VariantValue(k, v) for k, v in variants.items()}
        self.platform = platform

    def _term(self, term):
        if term.startswith("platform="):
            return self.platform == term.split("=", 1)[1]
        if term[0] in "+~":
            name = term[1:]
            if name not in self.variants or not isinstance(self.variants[name].value, bool):
                raise ValueError("condition '{0}': no boolean variant {1}".format(term, name))
            return self.variants[name].value == (term[0] == "+")
        if "=" in term:
            name, value = term.split("=", 1)
            if name not in self.variants:
                raise ValueError("condition '{0}': no variant {1}".format(term, name))
            return str(self.variants[name].value) == value
        raise ValueError("this stub cannot evaluate the condition term '{0}'".format(term))

    def satisfies(self, condition):
        # "+a ~b backend=x" (also "+a~b"): every term must hold.
        terms = re.findall(r"[+~][a-z0-9_-]+|[a-z0-9_-]+=[^\s+~]+|\S+", condition or "")
        return all(self._term(t) for t in terms)

    def __contains__(self, condition):
        return self.satisfies(condition)


class _Prefix(str):
    def __getattr__(self, sub):
        return _Prefix(os.path.join(self, sub))


def join_path(*parts):
    return os.path.join(*parts)


@contextlib.contextmanager
def working_dir(path):
    old = os.getcwd()
    os.makedirs(path, exist_ok=True)
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class Executable:
    """Spack's Executable: calling it runs the program. Every call is also
    recorded in Executable.calls (program, arguments, working directory), and
    with Executable.dry_run set nothing runs: what the recipe test uses to
    see what check() would do."""

    calls = []
    dry_run = False

    def __init__(self, path):
        self.path = path

    def __call__(self, *args, output=None, error=None, fail_on_error=True):
        Executable.calls.append((self.path, list(args), os.getcwd()))
        if Executable.dry_run:
            return "" if output is str else None
        res = subprocess.run([self.path] + list(args), stdout=subprocess.PIPE if output is str else None,
                             stderr=subprocess.STDOUT if error is str else None, text=True)
        if fail_on_error and res.returncode != 0:
            raise InstallError("{0} {1} exited with {2}".format(self.path, shlex.join(args), res.returncode))
        return res.stdout if output is str else None


def which(name):
    return Executable(name)


_callbacks = "_spack_run_after"


def run_after(phase):
    def mark(fn):
        setattr(fn, _callbacks, phase)
        return fn

    return mark


def on_package_attributes(**attrs):
    def wrap(fn):
        def guarded(self, *args, **kwargs):
            if all(getattr(self, k, None) == v for k, v in attrs.items()):
                return fn(self, *args, **kwargs)
            return None

        guarded.__name__ = fn.__name__
        guarded.__doc__ = fn.__doc__
        return guarded

    return wrap


class CMakePackage:
    """What the recipe derives from. Class attributes filled from the
    directives: versions, variants (name -> Variant), dependencies (list of
    Dependency), conflicts_list ((spec, when, msg)), extendees."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.versions, cls.variants, cls.dependencies = {}, {}, []
        cls.conflicts_list, cls.extendees = [], []
        for kind, args, kw in _pending:
            if kind == "version":
                cls.versions[args[0]] = kw
            elif kind == "variant":
                name = args[0]
                if name in cls.variants:
                    raise ValueError("variant {0} declared twice".format(name))
                cls.variants[name] = Variant(name, kw.get("default", False), kw.get("description", ""),
                                             kw.get("values"), kw.get("multi", False))
            elif kind == "depends_on":
                cls.dependencies.append(Dependency(args[0], kw.get("when"), kw.get("type")))
            elif kind == "conflicts":
                cls.conflicts_list.append((args[0], kw.get("when"), kw.get("msg")))
            elif kind == "extends":
                cls.extendees.append((args[0], kw.get("when")))
        _pending.clear()
        cls.after_install = [
            name for name, fn in vars(cls).items() if getattr(fn, _callbacks, None) == "install"
        ]

    def __init__(self, spec, prefix="/opt/spack/rfaas", build_directory="spack-build", run_tests=False):
        for name, var in self.variants.items():
            if name not in spec.variants:
                raise ValueError("spec lacks variant {0}".format(name))
            value = spec.variants[name].value
            allowed = var.values if not var.is_bool else (True, False)
            if value not in allowed:
                raise ValueError("variant {0}={1} not in {2}".format(name, value, allowed))
        self.spec = spec
        self.prefix = _Prefix(prefix)
        self.build_directory = build_directory
        self.run_tests = run_tests

    def active_dependencies(self):
        return [d for d in self.dependencies if self.spec.satisfies(d.when)]

    def conflicting(self):
        return [(s, msg) for s, when, msg in self.conflicts_list
                if self.spec.satisfies(s) and self.spec.satisfies(when)]

    @staticmethod
    def define(cmake_var, value):
        # Spack's CMakeBuilder.define.
        if isinstance(value, bool):
            kind, value = "BOOL", "ON" if value else "OFF"
        else:
            kind = "STRING"
        if isinstance(value, (list, tuple)):
            value = ";".join(str(v) for v in value)
        return "-D{0}:{1}={2}".format(cmake_var, kind, value)

    def define_from_variant(self, cmake_var, variant=None):
        variant = variant or cmake_var.lower()
        if variant not in self.variants:
            raise KeyError("define_from_variant: no variant {0}".format(variant))
        return self.define(cmake_var, self.spec.variants[variant].value)
