"""Private numba kernels. Each is called by one public wrapper of the same stem; kernels read no
globals, validate nothing, and take randomness as a seed argument."""
