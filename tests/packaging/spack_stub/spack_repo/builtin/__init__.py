"""Stand-in for Spack 1.x's package repository namespace (spack_repo), where
the build-system base classes live; see spack/package.py."""
