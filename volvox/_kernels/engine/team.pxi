# The team: worker threads that live as long as the process and run a plan's steps beside the
# calling thread, with the runner's work sharing (runner.pxi: run_thread, claim, wait_done).
#
# An OpenMP region ends at a barrier every thread must reach: on a busy machine the OS deschedules a
# team thread for whole scheduler ticks, and the caller waits at that barrier for it even when the
# others took its share of every step. A team run ends when its last step's items are finished:
# the caller claims what a late worker has not started, and a worker that wakes after the run finds
# every item taken and goes back to waiting. So the caller waits only on items in progress.
#
# Each run is published in one of two job slots (run g in slot g % 2) with its own work counters.
# A worker enters a slot (busy[k] + 1), then checks that the slot still holds the run it woke for;
# the caller rewrites a slot (two runs later) only after marking it stale and seeing no worker in it,
# so a late worker reads a finished run's counters (nothing left to claim), never a half-written job.
# Idle workers spin on the run counter, then sleep on a condition variable. A per-op call (a few
# steps, counters on its stack) opens an OpenMP region instead (runner.pxi: run_steps).
from libc.stdint cimport intptr_t
from libc.stdlib cimport calloc, free

cdef extern from "<pthread.h>" nogil:
    ctypedef int pthread_t
    ctypedef int pthread_mutex_t
    ctypedef int pthread_cond_t
    int pthread_create(pthread_t *thread, const void *attr, void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_detach(pthread_t thread)
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_broadcast(pthread_cond_t *c)
    int pthread_atfork(void (*prepare)() noexcept nogil, void (*parent)() noexcept nogil,
                       void (*child)() noexcept nogil)

cdef extern from * nogil:
    int64_t atomic_add "__atomic_add_fetch" (int64_t *p, int64_t v, int order)
    int64_t atomic_load64 "__atomic_load_n" (const int64_t *p, int order)
    void atomic_store64 "__atomic_store_n" (int64_t *p, int64_t v, int order)
    int SEQ_CST "__ATOMIC_SEQ_CST"
    bint atomic_cas64 "__atomic_compare_exchange_n" (int64_t *p, int64_t *expected, int64_t desired, bint weak,
                                                     int success_order, int failure_order)

cdef enum:
    SPINS_BEFORE_SLEEP = 10000   # an idle worker's checks for a new run before it sleeps (GOMP_SPINCOUNT's)
    STALE = -1                   # a job slot's run number while the caller rewrites it
    TEAM_BUSY = 1                # team_run's answer while another caller runs on the team


cdef struct TeamJob:
    int64_t run                  # the run this slot holds (STALE while rewritten)
    const Step *steps
    int64_t n
    RunInput inp
    int team                     # threads splitting the work (the caller is thread 0)
    StepSync sync                # counters of steps[0..n)
    void *rows_block             # sync.rows' allocation
    int64_t capacity             # steps the counters have room for


cdef struct Team:
    int64_t in_use               # 1 while a caller runs a plan on the team
    int64_t runs                 # runs published so far; run g sits in jobs[g % 2]
    TeamJob jobs[2]
    int64_t busy[2]              # workers inside jobs[k]
    int64_t sleepers             # workers asleep on `wake`
    int workers                  # worker threads started (thread ids 1 .. workers)
    pthread_mutex_t lock
    pthread_cond_t wake


cdef Team _team


cdef void team_init() noexcept nogil:
    memset(&_team, 0, sizeof(Team))
    _team.jobs[0].run = STALE
    _team.jobs[1].run = STALE
    pthread_mutex_init(&_team.lock, NULL)
    pthread_cond_init(&_team.wake, NULL)


cdef void team_after_fork() noexcept nogil:
    """A forked child has no workers: start over (the parent's counter blocks are left behind)."""
    team_init()


cdef void *worker_main(void *arg) noexcept nogil:
    """Thread `arg`'s life: wait for a run, walk its steps if it is on that run's team, repeat."""
    cdef int me = <int> <intptr_t> arg, spins
    cdef int64_t seen = 0, run, k
    cdef TeamJob *job
    while True:
        spins = 0
        run = atomic_load64(&_team.runs, ACQUIRE)
        while run == seen:
            spins += 1
            if spins < SPINS_BEFORE_SLEEP:
                cpu_relax()
            else:
                pthread_mutex_lock(&_team.lock)
                atomic_add(&_team.sleepers, 1, SEQ_CST)
                while atomic_load64(&_team.runs, SEQ_CST) == seen:
                    pthread_cond_wait(&_team.wake, &_team.lock)
                atomic_add(&_team.sleepers, -1, SEQ_CST)
                pthread_mutex_unlock(&_team.lock)
                spins = 0
            run = atomic_load64(&_team.runs, ACQUIRE)
        seen = run
        k = run % 2
        job = &_team.jobs[k]
        atomic_add(&_team.busy[k], 1, SEQ_CST)
        if atomic_load64(&job.run, SEQ_CST) == run and me < job.team:
            run_thread(job.steps, job.n, &job.inp, job.team, &job.sync, me, NULL)
        atomic_add(&_team.busy[k], -1, SEQ_CST)


cdef int team_start_workers(int team) noexcept nogil:
    """Workers up to thread team - 1; returns the team size they allow (fewer if a thread would not start)."""
    cdef pthread_t thread
    while _team.workers < team - 1:
        if pthread_create(&thread, NULL, worker_main, <void *> <intptr_t> (_team.workers + 1)) != 0:
            break
        pthread_detach(thread)
        _team.workers += 1
    return _team.workers + 1


cdef int team_run(const Step *steps, int64_t n, const RunInput *inp, int nthreads, double *times) noexcept nogil:
    """Runs steps[0..n) on `nthreads` threads: the calling thread and team workers; times: NULL, or n
    doubles that receive each step's wall seconds. Returns 0 when they ran, TEAM_BUSY (nothing ran)
    while another caller (another Python thread's plan) has the team, -1 when the counters could not
    be allocated (nothing ran)."""
    cdef int team = 1 if nthreads < 1 else (TEAM_MAX if nthreads > TEAM_MAX else nthreads)
    cdef int64_t i, item, items, idle = 0
    cdef int rc = 0
    cdef double t0
    if team > 1 and n > 0:
        if not atomic_cas64(&_team.in_use, &idle, 1, 0, SEQ_CST, SEQ_CST):
            return TEAM_BUSY
        team = team_start_workers(team)
        if team > 1:
            rc = team_walk(steps, n, inp, team, times)
        atomic_store64(&_team.in_use, 0, SEQ_CST)
        if team > 1:
            return rc
    for i in range(n):                                          # one thread: the steps in order
        t0 = now_seconds() if times != NULL else 0.0
        items = step_items(&steps[i], 1)
        for item in range(items):
            KINDS[steps[i].kind].run(&steps[i], inp, 0, 1, item)
        if times != NULL:
            times[i] = now_seconds() - t0
    return 0


cdef int team_walk(const Step *steps, int64_t n, const RunInput *inp, int team, double *times) noexcept nogil:
    """team_run's multi-thread run, the team held: publish the run, walk it as thread 0, wait for its
    last step."""
    cdef int64_t i, items, run, k, stride
    cdef int r, spins
    cdef TeamJob *job
    cdef uint64_t *c
    run = _team.runs + 1
    k = run % 2
    job = &_team.jobs[k]
    atomic_store64(&job.run, STALE, SEQ_CST)                    # no worker enters it from here on
    spins = 0
    while atomic_load64(&_team.busy[k], SEQ_CST) != 0:          # one still walking run - 2 (finished)
        spins += 1
        if spins < SPINS_BEFORE_YIELD:
            cpu_relax()
        else:
            sched_yield()
            spins = 0
    if job.capacity < n:
        free(job.rows_block)
        stride = (2 * n + 7) // 8 * 8
        job.rows_block = calloc(TEAM_MAX * stride + 8, sizeof(uint64_t))
        if job.rows_block == NULL:
            job.capacity = 0
            return -1
        job.capacity = n
        job.sync.stride = stride
        job.sync.rows = <uint64_t *> ((<uintptr_t> job.rows_block + 63) // 64 * 64)
    job.steps, job.n, job.inp, job.team = steps, n, inp[0], team
    for i in range(n):                                          # thread r's share: [r*items/team, ..)
        items = step_items(&steps[i], team)
        for r in range(team):
            c = counters(&job.sync, r, i)
            c[0] = <uint64_t>((r + 1) * items // team) << 32 | <uint64_t>(r * items // team)
            c[1] = 0
    atomic_store64(&job.run, run, SEQ_CST)
    atomic_store64(&_team.runs, run, SEQ_CST)                   # publish
    if atomic_load64(&_team.sleepers, SEQ_CST) > 0:
        pthread_mutex_lock(&_team.lock)
        pthread_cond_broadcast(&_team.wake)
        pthread_mutex_unlock(&_team.lock)
    run_thread(steps, n, &job.inp, team, &job.sync, 0, times)
    if times == NULL:                                           # (the timer waited for every step)
        wait_done(&job.sync, n - 1, team, step_items(&steps[n - 1], team))
    return 0


team_init()
pthread_atfork(NULL, NULL, team_after_fork)
