# The avx2 tier's own conv microkernels (kernels/conv.pxi has the shared bodies).
