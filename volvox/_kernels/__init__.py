"""Compiled CPU kernels (Cython + per-ISA C). Use them through :mod:`volvox.kernels`."""
