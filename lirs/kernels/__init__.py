"""All numba kernels live in this package: arrays and scalars in, preallocated outputs filled,
no globals, no RNG seeding inside. Python wrappers elsewhere validate and raise ``ValueError``."""
