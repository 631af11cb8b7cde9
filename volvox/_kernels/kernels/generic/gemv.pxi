# The generic tier's own gemv microkernels (kernels/gemv.pxi has the shared bodies).
