"""When a native plan's multi-thread team stalls, the next runs go to one thread.

Under load the OS deschedules a team thread for whole scheduler ticks (4 ms here), and a step
waiting on the item that thread holds waits with it (the team's runs no longer wait for a late
worker at their end: volvox/_kernels/engine/team.pxi; the figures below are from the OpenMP region
runs had before, which did): with one CPU-bound process beside it,
the person detector on 2 threads took 8-12 ms (median; EfficientNet 16-52 ms) against 0.52 ms
(8.5-17 ms) on one; SmolLM2 decode at 2 threads beside another SmolLM2 process ran 41 tok/s
against 110 on one.

So the first SOLO_FIRST runs use one thread, and a later run on several threads that is slower
than JITTER x the fastest run of the latest one-thread period, or than STALL x the fastest
multi-thread run, counts as a stall (except the first after one-thread runs, which also wakes
the sleeping team: 0.36 -> 0.50 ms): the next runs use one thread, BACKOFF_RUNS[0] of them,
doubling while stalls recur (up to BACKOFF_RUNS[1]), halving after a run without one. JITTER
leaves room for a model that two threads speed up only a little (the int8 person detector:
0.19 -> 0.15 ms, single runs up to 0.20): with 1.0 its ordinary outliers read as stalls and kept
it on one thread. The one-thread yardstick is the latest period's (not the fastest ever) because
a decode step slows as its context grows. A vision plan reports the time of its native step
ranges only: its numpy islands, and a garbage collection one of them may start, run on the
calling thread alone. Timing whole runs, the person detector's float twin (a softmax island)
backed off to one thread in 2 of 3 loops of 300 runs at 2 threads; timing the native ranges,
in none of 4.

A token step's time also jumps when its context does (a new prompt of 2,048 tokens after one of
64: SmolLM2's step 5.6 -> 16 ms), which against the old yardstick reads as a stall: decode at
2,048 tokens ran on one thread at 2 (60 tok/s, 63 on one). A token step whose position is far from
the previous one's (plan.run_token: by more than 32 + a quarter of it, so sessions of similar
length taking turns, as a server runs them, do not count) starts the pacer over (``restart``):
SOLO_FIRST one-thread runs measure the new context first.
"""

from __future__ import annotations

SOLO_FIRST = 4
STALL = 3.0
JITTER = 1.3
BACKOFF_RUNS = (64, 4096)


class Pacer:
    """The thread count of a plan's next run, from the times of its runs so far."""

    def __init__(self):
        self.restart()

    def restart(self) -> None:
        """Forget the runs so far (their work differed from the next runs'): measure afresh."""
        self.solo_runs = SOLO_FIRST  # runs left on one thread
        self._backoff = BACKOFF_RUNS[0]
        self._fastest = [float("inf")] * 2  # seconds: [latest one-thread period's fastest, several threads' fastest]
        self._team_awake = False  # whether the last run used several threads

    def threads(self, team: int) -> int:
        """Threads for the next run: one while backing off, else ``team``."""
        return 1 if self.solo_runs else team

    def pace(self, threads: int, seconds: float) -> None:
        """Account one run of ``seconds`` on ``threads``: a stalled multi-thread run sends the
        next runs to one thread."""
        fastest = self._fastest
        if threads == 1:
            fastest[0] = seconds if self._team_awake else min(fastest[0], seconds)  # a new period starts over
            self.solo_runs = max(0, self.solo_runs - 1)
            self._team_awake = False
            return
        if not self._team_awake:  # the first run after one-thread runs also wakes the team: not judged
            self._team_awake = True
            return
        fastest[1] = min(fastest[1], seconds)
        if seconds > min(JITTER * fastest[0], STALL * fastest[1]):
            self.solo_runs = self._backoff
            self._backoff = min(2 * self._backoff, BACKOFF_RUNS[1])
        else:
            self._backoff = max(BACKOFF_RUNS[0], self._backoff // 2)
