"""Operators: the numba kernels and the stateful operators that run a plan over Arrow batches."""
