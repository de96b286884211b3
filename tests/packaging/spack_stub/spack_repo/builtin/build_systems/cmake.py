"""Stand-in for spack_repo.builtin.build_systems.cmake: Spack 1.x's home of
CMakePackage. It is the stub's one class (spack/package.py), so that a recipe
loaded either way declares into the same records."""
from spack.package import CMakePackage  # noqa: F401
