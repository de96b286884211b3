"""Stand-in for Spack 1.x's build systems of the builtin repository."""
