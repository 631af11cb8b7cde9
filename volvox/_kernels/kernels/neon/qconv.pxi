# The neon tier's own qconv microkernels (kernels/qconv.pxi has the shared bodies).
