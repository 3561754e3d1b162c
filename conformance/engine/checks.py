"""Rules of the engine role that are judged on what the harness recorded, outside the protocol
machine, each in one place: the conformance cases raise what these return, and the explorer
(``conformance/explore``) turns it into a finding.

Each function returns the :class:`~ecp.conformance.outcomes.CaseFailure` (with its clause) that the
record shows, or None.
"""

from __future__ import annotations

from ecp.spec import EngineCoreReadyResponse, decode_any

from ..outcomes import CaseFailure


def hello_violation(rec) -> CaseFailure | None:
    """``ECP-HS-1`` on one engine's handshake record (``harness_frontend.EngineRecord``): HELLO is a
    map whose first key is ``status: "HELLO"`` with bool ``local`` and ``headless``, never both true,
    and READY says the same two values."""
    if rec.hello_error:
        return CaseFailure(f"identity {rec.identity.hex()}: bad HELLO: {rec.hello_error}", clause="ECP-HS-1")
    raw = decode_any(rec.hello_raw)
    if not isinstance(raw, dict) or raw.get("status") != "HELLO":
        return CaseFailure(f"identity {rec.identity.hex()}: first handshake message is {raw!r}, not a HELLO map",
                         clause="ECP-HS-1")
    for key in ("local", "headless"):
        if not isinstance(raw.get(key), bool):
            return CaseFailure(f"HELLO key {key!r} is {raw.get(key)!r}, expected a bool", clause="ECP-HS-1")
    # the deployments: co-located (local, not headless), headless remote (not local, headless),
    # hybrid or external LB toward rank 0 (neither); never both
    hello = (raw["local"], raw["headless"])
    if hello == (True, True):
        return CaseFailure(f"identity {rec.identity.hex()}: HELLO says local=true and headless=true; an engine "
                         "co-located with its frontend is not headless", clause="ECP-HS-1")
    if rec.ready is not None and (rec.ready.local, rec.ready.headless) != hello:
        return CaseFailure(f"identity {rec.identity.hex()}: HELLO says local={hello[0]}, headless={hello[1]} but "
                         f"READY says local={rec.ready.local}, headless={rec.ready.headless}; both carry the "
                         "engine's one deployment", clause="ECP-HS-1")
    return None


def ready_hash_violation(rec) -> CaseFailure | None:
    """``ECP-HS-5``: an engine whose ready payload says ``data_parallel_size`` > 1 carries a str
    ``parallel_config_hash`` in READY."""
    # the engine's own DP size, as its ready payload says (vLLM's dense DP ranks are independent
    # engines of size 1; its MoE ranks one group of size N)
    sizes = {p.data_parallel_size for p in rec.ready_payloads.values() if isinstance(p, EngineCoreReadyResponse)}
    if rec.ready is not None and max(sizes, default=1) > 1 and not isinstance(rec.ready.parallel_config_hash, str):
        return CaseFailure(f"engine {rec.identity.hex()} says data_parallel_size {max(sizes)} in its ready "
                         f"payload but sent READY without a parallel_config_hash (got "
                         f"{rec.ready.parallel_config_hash!r}); at data_parallel_size > 1 it must carry one "
                         "(a coordinated-DP frontend refuses the engine)", clause="ECP-HS-5")
    return None


def wave_complete_violation(fe) -> CaseFailure | None:
    """``ECP-DP-5.5``: only the engine of global DP rank 0 sends ``wave_complete`` to the coordinator."""
    others = sorted({msg.engine_index for msg in fe.coordinator_messages
                     if msg.wave_complete is not None and msg.engine_index != 0})
    if others:
        last = fe.start_index + fe.engine_count - 1
        return CaseFailure(f"rank(s) {others} of a launch of ranks {fe.start_index}..{last} sent wave_complete "
                         "to the coordinator; only global rank 0 reports that every engine is idle", clause="ECP-DP-5")
    return None
