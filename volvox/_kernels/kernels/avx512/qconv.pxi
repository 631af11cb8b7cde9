# The avx512 tier's own qconv microkernels (kernels/qconv.pxi has the shared bodies).
