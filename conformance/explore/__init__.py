"""``ecp conformance explore``: random legal sessions against a peer, judged frame by frame.

A *session* (:mod:`.session`) is a role, a topology and a list of steps. Engine role: ADDs, ABORTs,
utility calls, START_DP_WAVE, malformed frames and timing choices (waits); :mod:`.generate` draws
them from a seed and :mod:`.execute` plays them against a freshly launched engine through the
harness frontend of the engine role (whose protocol machine, in recording mode, judges every
frame), and :mod:`.oracle` adds the properties of the whole history checked at the session's end.
Frontend role: concurrent HTTP requests, dropped streams, explicit aborts, utility routes and
waits against the suite's scripted engines; :mod:`.frontend_generate` draws them and
:mod:`.frontend_execute` plays them and judges the history. For both roles :mod:`.shrink` reduces
a failing session to a minimal one showing the same clause, :mod:`.reproducer` writes and reads
the files ``ecp conformance replay`` re-runs, and :mod:`.run` is the loop under a time budget.
"""
