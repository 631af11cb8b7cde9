# The runner: one nogil call runs a plan's steps on a team of threads, with no barrier between
# steps. A plan runs on the team's persistent workers (team.pxi: team_run); run_steps opens one
# OpenMP region instead, for a per-op call (counters on its stack) and for a plan run while another
# Python thread's plan has the team.
#
# Every thread walks the same step array. For step i it claims items until none are left: first
# its own contiguous share of the step's items (the same image rows as its share of the step
# before, still in its core's cache), then the last items of other threads' shares. Before running
# its first item of step i it waits until step i-1 is done (all of its items finished: by
# induction every earlier step is then done too). A thread that arrives late (descheduled, or
# still busy with its last item) finds its share taken by the others and moves on, so a busy
# machine slows a forward pass instead of stalling it at every step. A one-thread team runs the
# steps in order in the calling thread, with no region and no counters.
from cython.parallel cimport parallel, threadid
from libc.stdint cimport uint64_t, uintptr_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cdef extern from "<sched.h>" nogil:
    int sched_yield()

# Atomics on the work counters (GCC / Clang builtins: type-generic, so declared for uint64_t here).
cdef extern from * nogil:
    uint64_t atomic_load "__atomic_load_n" (const uint64_t *p, int order)
    void atomic_store "__atomic_store_n" (uint64_t *p, uint64_t v, int order)
    bint atomic_cas "__atomic_compare_exchange_n" (uint64_t *p, uint64_t *expected, uint64_t desired,
                                                   bint weak, int success_order, int failure_order)
    int RELAXED "__ATOMIC_RELAXED"
    int ACQUIRE "__ATOMIC_ACQUIRE"
    int RELEASE "__ATOMIC_RELEASE"

# A spinning thread's pause: the x86 / arm64 spin-wait hint (an instruction Cython cannot name).
cdef extern from *:
    """
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    #define vx_cpu_relax() _mm_pause()
    #elif defined(__aarch64__)
    #define vx_cpu_relax() __asm__ __volatile__("yield")
    #else
    #define vx_cpu_relax() ((void)0)
    #endif
    """
    void cpu_relax "vx_cpu_relax" () nogil

cdef enum:
    SPINS_BEFORE_YIELD = 2000   # spins on a counter before yielding the core to whatever the OS wants


cdef struct StepSync:
    # Work counters of a run: row t (thread t's, `stride` uint64s from row t-1, whole cache lines)
    # holds for step i slot 2i: the items thread t has not yet started, [lo, hi) packed as
    # hi << 32 | lo (its owner takes lo, a thread out of work takes hi - 1), and slot 2i + 1: the
    # items thread t has finished. run_steps fills rows 0 .. team-1 before its region.
    uint64_t *rows               # (TEAM_MAX, stride)
    int64_t stride               # >= 2 * steps, a multiple of 8


cdef inline double now_seconds() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + 1e-9 * <double>ts.tv_nsec


cdef inline uint64_t *counters(const StepSync *sync, int t, int64_t i) noexcept nogil:
    """Thread t's counters of step i."""
    return sync.rows + t * sync.stride + 2 * i


cdef inline int64_t step_items(const Step *s, int team) noexcept nogil:
    return KINDS[s.kind].items(s, team)


cdef int64_t claim(const StepSync *sync, int64_t i, int me, int team) noexcept nogil:
    """An item of step i: thread `me`'s own range's first, else (its range used up) the last unstarted
    item of another thread's range; -1 when none is left. Contiguous ranges keep a thread on the same
    image rows step after step; stealing from the far end keeps a late owner's next items."""
    cdef int k, t
    cdef uint64_t v, lo, hi, nxt
    cdef uint64_t *slot
    for k in range(team):
        t = (me + k) % team
        slot = counters(sync, t, i)
        v = atomic_load(slot, RELAXED)
        while True:
            lo = v & 0xffffffffu
            hi = v >> 32
            if lo >= hi:
                break
            nxt = v + 1 if t == me else ((hi - 1) << 32) | lo
            if atomic_cas(slot, &v, nxt, 1, RELAXED, RELAXED):
                return <int64_t>(lo if t == me else hi - 1)
    return -1


cdef void wait_done(const StepSync *sync, int64_t i, int team, int64_t items) noexcept nogil:
    """Waits until `items` items of step i are finished (summed over the team's rows)."""
    cdef int spins = 0, t
    cdef int64_t done
    while True:
        done = 0
        for t in range(team):
            done += <int64_t>atomic_load(counters(sync, t, i) + 1, ACQUIRE)
        if done >= items:
            return
        spins += 1
        if spins < SPINS_BEFORE_YIELD:
            cpu_relax()
        else:
            sched_yield()
            spins = 0


cdef void run_thread(const Step *steps, int64_t n, const RunInput *inp, int team, const StepSync *sync, int me,
                     double *times) noexcept nogil:
    """Thread `me`'s walk over the steps (times: thread 0 waits for each step and records it)."""
    cdef bint timer = times != NULL and me == 0, ready
    cdef double t0 = now_seconds() if timer else 0.0, t1
    cdef int64_t i, item
    cdef uint64_t *done
    cdef const Step *s
    for i in range(n):
        s = &steps[i]
        ready = i == 0
        item = claim(sync, i, me, team)
        while item >= 0:
            if not ready:
                wait_done(sync, i - 1, team, step_items(&steps[i - 1], team))
                ready = True
            KINDS[s.kind].run(s, inp, me, team, item)
            done = counters(sync, me, i) + 1                    # only thread me writes it
            atomic_store(done, done[0] + 1, RELEASE)
            item = claim(sync, i, me, team)
        if timer:
            wait_done(sync, i, team, step_items(s, team))
            t1 = now_seconds()
            times[i] = t1 - t0
            t0 = t1


cdef void run_steps(const Step *steps, int64_t n, const RunInput *inp, int nthreads, const StepSync *sync,
                    int64_t first, double *times) noexcept nogil:
    """Runs steps[0..n) on `nthreads` threads; sync: counters for at least first + n steps, of which
    these steps use those of first .. first + n - 1 (unused by a one-thread team: it may be NULL).
    times: NULL, or n doubles that receive each step's wall seconds."""
    cdef int team = 1 if nthreads < 1 else (TEAM_MAX if nthreads > TEAM_MAX else nthreads)
    cdef int64_t i, item, items
    cdef int r, me
    cdef double t0
    cdef StepSync at
    cdef uint64_t *c
    if team == 1:
        for i in range(n):
            t0 = now_seconds() if times != NULL else 0.0
            items = step_items(&steps[i], 1)
            for item in range(items):
                KINDS[steps[i].kind].run(&steps[i], inp, 0, 1, item)
            if times != NULL:
                times[i] = now_seconds() - t0
        return
    at = sync[0]                                                # counters of steps[0] on
    at.rows += 2 * first
    for i in range(n):                                          # thread r's share: [r*items/team, ..)
        items = step_items(&steps[i], team)
        for r in range(team):
            c = counters(&at, r, i)
            c[0] = <uint64_t>((r + 1) * items // team) << 32 | <uint64_t>(r * items // team)
            c[1] = 0
    with parallel(num_threads=team):
        me = threadid()
        run_thread(steps, n, inp, team, &at, me if me < team else 0, times)
    # the region's closing barrier: every claimed item has run


cdef struct StackSync:
    # counters for a per-op call of at most 4 steps on up to TEAM_MAX threads, cache-line aligned
    uint64_t block[TEAM_MAX * 8 + 8]


cdef inline StepSync stack_sync(StackSync *space) noexcept nogil:
    """A StepSync over `space` (stride 8: up to 4 steps)."""
    cdef StepSync sync
    sync.rows = <uint64_t *> ((<uintptr_t> space.block + 63) // 64 * 64)
    sync.stride = 8
    return sync
