"""``ecp conformance explore``: random legal sessions against a peer, judged frame by frame.

A *session* (:mod:`.session`) is a topology and a list of steps -- ADDs, ABORTs, utility calls,
START_DP_WAVE, malformed frames and timing choices (waits). :mod:`.generate` draws sessions from a
seed; :mod:`.execute` plays one against a freshly launched peer through the harness frontend of the
engine role (whose protocol machine, in recording mode, judges every frame); :mod:`.oracle` adds the
properties of the whole history checked at the session's end; :mod:`.shrink` reduces a failing
session to a minimal one showing the same clause; :mod:`.reproducer` writes and reads the files
``ecp conformance replay`` re-runs; :mod:`.run` is the loop under a time budget.
"""
