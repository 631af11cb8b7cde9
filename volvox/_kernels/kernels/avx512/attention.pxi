# The avx512 tier's own attention microkernels (kernels/attention.pxi has the shared bodies): the
# avx2 tier's 8-lane ggml arithmetic (ggml's AVX-512 build sums in 16 lanes: docs/internals.md).
include "../avx2/attention.pxi"
