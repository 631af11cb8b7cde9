# The avx512 tier's own attention microkernels (kernels/attention.pxi has the shared bodies).
