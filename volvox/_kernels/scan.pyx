# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Byte-scanning loops the file readers need (volvox/formats): walking a GGUF string table, whose
entries (a u64 length, then the bytes) can only be found one after another (98k of them in a small
LLM's vocabulary and merges: tens of ms of Python per load, well under one here)."""
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np


def string_table(const unsigned char[::1] buf, int64_t pos, int64_t count):
    """Walk `count` GGUF strings from byte `pos` of buf: (table, starts, ends, bad). table is a copy of
    the entries' bytes with each length field zeroed (NUL bytes: no UTF-8 sequence spans two strings,
    so the table decodes iff every string does); starts / ends (count,) int64 are each string's range
    in it. bad is -1 when every entry fits in buf, else the index of the first whose length or bytes
    run past its end (table is then empty, the ranges before it filled, relative to pos)."""
    starts = np.empty(count, np.int64)  # (count,)
    ends = np.empty(count, np.int64)    # (count,)
    cdef int64_t[::1] s = starts
    cdef int64_t[::1] e = ends
    cdef int64_t size = buf.shape[0], start = pos, i, bad = -1
    cdef uint64_t n
    with nogil:
        for i in range(count):
            if pos + 8 > size:
                bad = i
                break
            memcpy(&n, &buf[pos], 8)  # little-endian, as the file and every tier's CPU
            pos += 8
            if n > <uint64_t>(size - pos):
                bad = i
                break
            s[i] = pos - start
            pos += <int64_t>n
            e[i] = pos - start
    if bad >= 0:
        return b"", starts, ends, bad
    table = bytearray(buf[start:pos])   # (pos - start,)
    cdef unsigned char[::1] t = table
    with nogil:
        for i in range(count):
            memset(&t[s[i] - 8], 0, 8)
    return bytes(table), starts, ends, bad
