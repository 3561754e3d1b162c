"""Whether an engine the cases used can serve the next case: the checks the engine role's manager
(:class:`~.session.EngineManager`) runs before reusing one. They send only what a correct frontend
sends, with no case budget, and any doubt means a relaunch, never a verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..outcomes import FailedClosed, PeerCrashed

if TYPE_CHECKING:
    from .launches import EngineUnderTest

#: how long the health probe after a failed case waits for a 2-token request (a serving engine
#: answers within milliseconds)
HEALTH_PROBE_S = 5.0

#: utility methods after which an engine is relaunched rather than checked and reused: what sleep
#: discarded (weights, KV cache) cannot be read back over the wire
UNRESTORABLE_METHODS = frozenset({"sleep", "wake_up"})


def restored(eut: EngineUnderTest) -> bool:
    """Whether an engine a case changed on purpose is back in its initial state: it never slept,
    still reads input, answers ``is_sleeping`` and ``is_scheduler_paused`` with false on every
    rank and serves a 2-token probe. Its leftover requests are aborted first. What the check
    sends is the harness's: the caller counts nothing it records against the case about to run."""
    fe = eut.fe
    if (not eut.alive() or fe.stopped_serving is not None or fe.input_closed is not None
            or fe.methods_sent & UNRESTORABLE_METHODS):
        return False
    before = len(fe.machine.violations)
    saved, fe.deadline = fe.deadline, None
    try:
        for k in range(fe.engine_count):
            open_ids = fe.unfinished(engine=k)
            if open_ids:
                fe.abort(open_ids, engine=k)
            for method in ("is_sleeping", "is_scheduler_paused"):
                u = fe.call(method, [], engine=k, timeout=HEALTH_PROBE_S).utility
                if u.failure_message is not None or u.result is None or u.result.value is not False:
                    return False
            fe.serves(engine=k, after="the check for reuse", timeout=HEALTH_PROBE_S)
    except Exception:  # noqa: BLE001 - any doubt means a relaunch, never a verdict
        return False
    finally:
        fe.deadline = saved
    return len(fe.machine.violations) == before


def probe(eut: EngineUnderTest) -> str | None:
    """After a failed case: abort the case's unfinished requests, then a 2-token probe per engine.
    A sentence for the report when the engine no longer serves; None when it does (or when the
    case's own probe already failed: that is the evidence, and the engine is relaunched)."""
    fe = eut.fe
    if fe.stopped_serving is not None or fe.input_closed is not None:
        return None  # the case's own probe already failed: that is the evidence; relaunch
    saved = fe.deadline
    fe.deadline = None
    try:
        for k in range(fe.engine_count):
            open_ids = fe.unfinished(engine=k)
            if open_ids:
                fe.abort(open_ids, engine=k)
        for k in range(fe.engine_count):
            fe.serves(engine=k, after="the case", timeout=HEALTH_PROBE_S)
    except FailedClosed as exc:
        return f"after the case the engine failed closed ({exc})"
    except PeerCrashed as exc:
        if eut.handle is not None and eut.handle.exit_status() is None:
            return (f"after the case the engine no longer accepts input ({exc}): it closed its input "
                    "connection, yet its process is still running and it sent no ENGINE_CORE_DEAD")
        return f"after the case the engine died ({exc})"
    except AssertionError as exc:
        if not eut.alive():
            return f"after the case the engine died ({exc})"
        return (f"after the case {exc}; its process is still running and it sent no ENGINE_CORE_DEAD: "
                "it stopped serving without failing closed (a frontend cannot tell it from a slow engine)")
    finally:
        fe.deadline = saved
    return None
