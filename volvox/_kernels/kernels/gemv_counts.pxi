# gemv: compile-time counts for the tiles (included by each tier's kernels/<tier>/gemv.pxi, whose
# tiles take them, ahead of kernels/gemv.pxi).
#
# A tile takes `const act_rows *` (or `const row_pairs *`), a null pointer whose type says how many
# act rows (weight row pairs) it handles, and reads the count as sizeof(act_rows). Cython emits one
# C function per count, the count a constant in its body, so its accumulators stay in registers
# whatever GCC's inliner does (cdef inline is not always_inline: within its inlining budget
# GCC left tiles as clones with the count a runtime value and their accumulators on the stack).
ctypedef struct count_1:
    char n[1]
ctypedef struct count_2:
    char n[2]
ctypedef struct count_3:
    char n[3]
ctypedef struct count_4:
    char n[4]
ctypedef fused act_rows:       # act rows of a tile: 1 .. 4
    count_1
    count_2
    count_3
    count_4
ctypedef fused row_pairs:      # weight row pairs of the avx512 32-block tile: 1, 2
    count_1
    count_2
