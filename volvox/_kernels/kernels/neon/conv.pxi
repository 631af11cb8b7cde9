# The neon tier's own conv microkernels (kernels/conv.pxi has the shared bodies).
