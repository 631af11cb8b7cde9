# Every tier module's body: the kernel families, each filling its entries of the tier's table, then
# the table itself, handed to the engine as a capsule (table(): the engine passes what it detected
# of the CPU beyond the tier's flags). Included by tier_<name>.pyx after its vector layer and its own
# microkernels (kernels/<tier>/<family>.pxi).
from cpython.pycapsule cimport PyCapsule_New
from libc.string cimport memset
from volvox._kernels.vx cimport (
    VX_F16, VX_F32, VX_NTYPES, vx_block_iq4_nl, vx_block_q2_K, vx_block_q3_K, vx_block_q4_0,
    vx_block_q4_1, vx_block_q4_K, vx_block_q5_0, vx_block_q5_1, vx_block_q5_K, vx_block_q6_K,
    vx_block_q8_0, vx_conv_table, vx_rope_yarn, vx_table, vx_train_table)

include "rows.pxi"
include "gemv.pxi"
include "gemv_q5_iq4.pxi"
include "gemv_kquants.pxi"
include "conv.pxi"
include "sgemv.pxi"
include "qconv.pxi"
include "pool.pxi"
include "activation.pxi"
include "attention.pxi"
include "backward.pxi"

# The kernels read GGUF blocks in place: their structs must have ggml's sizes.
if (sizeof(vx_block_q4_0), sizeof(vx_block_q4_1), sizeof(vx_block_q8_0), sizeof(vx_block_q4_K),
        sizeof(vx_block_q6_K), sizeof(vx_block_q5_0), sizeof(vx_block_q5_1), sizeof(vx_block_iq4_nl),
        sizeof(vx_block_q2_K), sizeof(vx_block_q3_K), sizeof(vx_block_q5_K)) != (
        18, 20, 34, 144, 210, 22, 24, 18, 84, 110, 176):
    raise ImportError(f"{__name__}: the compiler laid out ggml's blocks with other sizes")

cdef vx_table _table
cdef vx_conv_table _conv
cdef vx_train_table _train
cdef object _capsule = None     # the filled table, once


cdef list _missing_kernels():
    """Names of table entries no family filled (only f32 / f16 take no activation quantizer)."""
    cdef int w
    missing = [f"gemm[{w}]" for w in range(VX_NTYPES) if _table.gemm[w] == NULL]
    missing += [f"dequant[{w}]" for w in range(VX_NTYPES) if _table.dequant[w] == NULL]
    missing += [f"quantize[{w}]" for w in range(VX_NTYPES)
                if _table.quantize[w] == NULL and w != VX_F32 and w != VX_F16]
    for name, fn in (("rms_norm", <size_t>_table.rms_norm), ("attention", <size_t>_table.attention),
                     ("swiglu", <size_t>_table.swiglu), ("rope", <size_t>_table.rope),
                     ("sgemm_pack", <size_t>_conv.sgemm_pack), ("sgemm", <size_t>_conv.sgemm),
                     ("sgemv", <size_t>_conv.sgemv),
                     ("conv_f32", <size_t>_conv.conv_f32), ("dwconv_f32", <size_t>_conv.dwconv_f32),
                     ("qgemm_pack", <size_t>_conv.qgemm_pack), ("im2col_u8", <size_t>_conv.im2col_u8),
                     ("qgemm", <size_t>_conv.qgemm), ("qdwconv", <size_t>_conv.qdwconv),
                     ("quantize_i8", <size_t>_conv.quantize_i8),
                     ("max_pool_f32", <size_t>_conv.max_pool_f32), ("avg_pool_f32", <size_t>_conv.avg_pool_f32),
                     ("global_avg_f32", <size_t>_conv.global_avg_f32),
                     ("hard_swish_f32", <size_t>_conv.hard_swish_f32),
                     ("matmul_t_strip", <size_t>_train.matmul_t_strip),
                     ("attention_fwd_block", <size_t>_train.attention_fwd_block),
                     ("attention_bwd_group", <size_t>_train.attention_bwd_group),
                     ("cross_entropy_row", <size_t>_train.cross_entropy_row),
                     ("cross_entropy_grad_row", <size_t>_train.cross_entropy_grad_row),
                     ("rms_norm_bwd_row", <size_t>_train.rms_norm_bwd_row)):
        if fn == 0:
            missing.append(name)
    return missing


def table(bint vbmi):
    """This tier's kernel table as a capsule for the engine, filled on the first call. vbmi: the CPU
    has AVX-512 VBMI and VOLVOX_IQ4_NL_VBMI does not turn it off (engine/tiers.pxi detects both)."""
    global _capsule
    if _capsule is not None:
        return _capsule
    memset(&_table, 0, sizeof(_table))
    memset(&_conv, 0, sizeof(_conv))
    memset(&_train, 0, sizeof(_train))
    _table.name = TIER_NAME
    _table.conv = &_conv
    _table.train = &_train
    fill_rows(&_table)
    fill_gemv(&_table, vbmi)
    fill_gemv_q5_iq4(&_table)
    fill_gemv_kquants(&_table)
    fill_conv(&_table)
    fill_sgemv(&_table)
    fill_qconv(&_table)
    fill_pool(&_table)
    fill_activation(&_table)
    fill_attention(&_table)
    fill_backward(&_train)
    missing = _missing_kernels()
    if missing:
        raise ImportError(f"{__name__}: no kernel for {', '.join(missing)}")
    _capsule = PyCapsule_New(&_table, "volvox._kernels.vx_table", NULL)
    return _capsule
