"""A small stand-in for Spack, enough to load and exercise rFaaS's recipe
(packaging/spack/rfaas/package.py) where Spack is not installed: see
package.py. Not Spack; nothing here resolves or builds anything."""
