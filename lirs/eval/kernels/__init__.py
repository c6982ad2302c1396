"""numba kernels of the evaluation package: arrays and scalars in, preallocated outputs filled,
no globals, no RNG seeding inside. Python wrappers validate and raise ``ValueError``."""
