# The avx2 tier's own attention microkernels (kernels/attention.pxi has the shared bodies).
