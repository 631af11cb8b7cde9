# Step plans (csrc/vx_plan.c), included into _core.pyx: a forward pass lowered to an
# array of kernel calls that runs in one nogil call and one OpenMP region. The builder
# (volvox/runtime/native_plan.py) checks every size and keeps every buffer alive; this
# class trusts the addresses it is given.
from libc.stdlib cimport calloc, free
from libc.stdint cimport int32_t, uintptr_t


cdef extern from "vx_plan.h" nogil:
    enum:
        VX_STEP_EMBED
        VX_STEP_RMS_NORM
        VX_STEP_QUANTIZE
        VX_STEP_LINEAR
        VX_STEP_ROPE
        VX_STEP_KV_STORE
        VX_STEP_ATTENTION
        VX_STEP_SWIGLU
        VX_STEP_BINARY
        VX_STEP_LAYER_NORM
        VX_STEP_GELU
    ctypedef struct vx_step:
        int32_t kind, wtype, flag
        int64_t n[6]
        float f[2]
        const void *a
        const void *b
        const void *c
        float *y
        void *scratch
    ctypedef struct vx_step_sync:
        int64_t claimed, done
    ctypedef struct vx_step_input:
        int64_t token, pos, capacity
        float *const *k_cache
        float *const *v_cache
    void vx_run_steps(const vx_table *t, const vx_step *steps, int64_t n, const vx_step_input *inp,
                      int nthreads, vx_step_sync *sync, double *times)

# Step kinds by name (csrc/vx_plan.h).
STEP_KINDS = {"embed": VX_STEP_EMBED, "rms_norm": VX_STEP_RMS_NORM, "quantize": VX_STEP_QUANTIZE,
              "linear": VX_STEP_LINEAR, "rope": VX_STEP_ROPE, "kv_store": VX_STEP_KV_STORE,
              "attention": VX_STEP_ATTENTION, "swiglu": VX_STEP_SWIGLU, "binary": VX_STEP_BINARY,
              "layer_norm": VX_STEP_LAYER_NORM, "gelu": VX_STEP_GELU}


cdef class StepPlan:
    """A fixed array of kernel steps plus the KV cache they read; see csrc/vx_plan.h."""
    cdef vx_step *steps
    cdef vx_step_sync *sync
    cdef int64_t n, cap, layers
    cdef float **k_cache
    cdef float **v_cache
    cdef int64_t kv_capacity

    def __cinit__(self, int64_t max_steps, int64_t layers):
        self.steps = <vx_step *> calloc(max(max_steps, 1), sizeof(vx_step))
        self.sync = <vx_step_sync *> calloc(max(max_steps, 1), sizeof(vx_step_sync))
        self.k_cache = <float **> calloc(max(layers, 1), sizeof(float *))
        self.v_cache = <float **> calloc(max(layers, 1), sizeof(float *))
        if self.steps == NULL or self.sync == NULL or self.k_cache == NULL or self.v_cache == NULL:
            raise MemoryError("step plan")
        self.cap = max_steps
        self.layers = layers
        self.n = 0

    def __dealloc__(self):
        free(self.steps)
        free(self.sync)
        free(self.k_cache)
        free(self.v_cache)

    def __len__(self):
        return self.n

    def add(self, int kind, int wtype=0, int flag=0, tuple sizes=(), tuple floats=(), uintptr_t a=0,
            uintptr_t b=0, uintptr_t c=0, uintptr_t y=0, uintptr_t scratch=0):
        """Append one step (addresses of buffers the caller keeps alive)."""
        if self.n >= self.cap or len(sizes) > 6 or len(floats) > 2:
            raise ValueError("step plan is full or a step has too many fields")
        cdef vx_step *s = &self.steps[self.n]
        cdef int i
        s.kind, s.wtype, s.flag = kind, wtype, flag
        for i in range(len(sizes)):
            s.n[i] = sizes[i]
        for i in range(len(floats)):
            s.f[i] = floats[i]
        s.a, s.b, s.c = <const void *> a, <const void *> b, <const void *> c
        s.y, s.scratch = <float *> y, <void *> scratch
        self.n += 1

    def bind_cache(self, list keys, list values, int64_t capacity):
        """Per-layer addresses of the KV cache arrays, each (n_kv_heads, capacity, head_dim)."""
        cdef int64_t i
        for i in range(self.layers):
            self.k_cache[i] = <float *> <uintptr_t> keys[i]
            self.v_cache[i] = <float *> <uintptr_t> values[i]
        self.kv_capacity = capacity

    def run(self, int64_t token, int64_t pos, double[::1] times=None):
        """Run every step for one token at position pos; times (len(self)) gets per-step seconds."""
        cdef vx_step_input inp
        inp.token, inp.pos, inp.capacity = token, pos, self.kv_capacity
        inp.k_cache, inp.v_cache = self.k_cache, self.v_cache
        cdef double *tp = NULL if times is None else &times[0]
        with nogil:
            vx_run_steps(_tbl, self.steps, self.n, &inp, _nthreads, self.sync, tp)
