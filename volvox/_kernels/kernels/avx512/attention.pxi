# The avx512 tier's own attention microkernels (kernels/attention.pxi has the shared bodies): the
# avx2 tier's, so the two tiers give the same bits.
include "../avx2/attention.pxi"
