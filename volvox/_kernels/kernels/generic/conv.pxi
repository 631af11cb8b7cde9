# The generic tier's own conv microkernels (kernels/conv.pxi has the shared bodies).
