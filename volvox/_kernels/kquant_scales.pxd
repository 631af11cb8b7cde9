# The k-quants' packed sub-block scales, unpacked: shared by the kernels (every tier) and the
# engine's interleaved packing (il_pack), which unpacks them once at load.
from libc.stdint cimport int8_t, uint8_t, uint32_t
from libc.string cimport memcpy


cdef inline void q4k_scales(const uint8_t *s, uint8_t *sc, uint8_t *mn) noexcept nogil:
    """ggml's get_scale_min_k4: 8 (scale, min) pairs of 6 bits packed in 12 bytes -> sc (8,), mn (8,)."""
    cdef int j
    for j in range(4):
        sc[j] = s[j] & 63
        mn[j] = s[j + 4] & 63
    for j in range(4, 8):
        sc[j] = <uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4))
        mn[j] = <uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4))


cdef inline void q3k_scales(const uint8_t *packed, int8_t *sc) noexcept nogil:
    """sc (16,) = q3_K's 6-bit scales minus 32: scale i's low 4 bits are the low (i < 8) or high
    nibble of packed[i % 8], its top 2 bits bits 2 (i // 4) .. +1 of packed[8 + i % 4] (ggml's
    32-bit shuffle of the 12 bytes, little-endian)."""
    cdef uint32_t aux[4]         # (4,) scales 4 j .. 4 j + 3 in aux[j], one per byte
    cdef uint32_t tmp
    cdef int i
    memcpy(aux, packed, 12)
    tmp = aux[2]
    aux[2] = ((aux[0] >> 4) & <uint32_t>0x0F0F0F0F) | (((tmp >> 4) & <uint32_t>0x03030303) << 4)
    aux[3] = ((aux[1] >> 4) & <uint32_t>0x0F0F0F0F) | (((tmp >> 6) & <uint32_t>0x03030303) << 4)
    aux[0] = (aux[0] & <uint32_t>0x0F0F0F0F) | (((tmp >> 0) & <uint32_t>0x03030303) << 4)
    aux[1] = (aux[1] & <uint32_t>0x0F0F0F0F) | (((tmp >> 2) & <uint32_t>0x03030303) << 4)
    memcpy(sc, aux, 16)
    for i in range(16):
        sc[i] = <int8_t>(sc[i] - 32)
