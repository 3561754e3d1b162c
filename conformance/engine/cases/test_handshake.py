"""Engine-role handshake cases (HELLO, identities, ready payloads, READY, clients)."""

from ecp.conformance.engine.checks import hello_violation
from ecp.conformance.outcomes import CaseFailure
from ecp.conformance.registry import case
from ecp.spec import EngineCoreReadyResponse, REQUIRED_READY_KEYS, decode_any, engine_identity
from ecp.spec import VLLM_RELEASE


def required_ready_keys(profile) -> list[str]:
    """The keys the release under test requires in a ready payload (vLLM 0.33's: REQUIRED_READY_KEYS)."""
    if profile.release == VLLM_RELEASE:
        return list(REQUIRED_READY_KEYS)
    return [f.name for f in profile.layout.messages[profile.frames["ready payload"]].fields if f.required]


def _records(engines):
    eut = engines.shared()
    engines.transcript.include([e for e in eut.fe.transcript.entries if e.channel in ("handshake",)
                                or e.channel.startswith("input") and e.direction == "recv"][:40],
                               "the shared engine's handshake")
    return eut.fe, list(eut.fe.evidence.records.values())


@case("ENG-HS-1")
def test_hello_fields(engines):
    fe, records = _records(engines)
    for rec in records:
        violation = hello_violation(rec)
        if violation is not None:
            raise violation


@case("ENG-HS-2")
def test_identity_per_rank(engines):
    fe, records = _records(engines)
    expected = {engine_identity(fe.start_index + k) for k in range(fe.engine_count)}
    for rec in records:
        if len(rec.identity) != 2:
            raise CaseFailure(f"identity {rec.identity.hex()} is {len(rec.identity)} bytes, expected 2")
        if rec.identity not in expected:
            raise CaseFailure(f"identity {rec.identity.hex()} is not one of the expected ranks "
                            f"{sorted(i.hex() for i in expected)}")
    handshake_ids = {r.identity for r in records if r.hello_raw is not None}
    input_ids = {r.identity for r in records if r.registrations}
    if handshake_ids != input_ids:
        raise CaseFailure(f"handshake identities {sorted(i.hex() for i in handshake_ids)} differ from input "
                        f"identities {sorted(i.hex() for i in input_ids)}")


@case("ENG-HS-3")
def test_ready_payload_keys(engines):
    fe, records = _records(engines)
    for rec in records:
        for client, payload in rec.ready_payloads.items():
            if payload is None:
                raise CaseFailure(f"identity {rec.identity.hex()} sent an empty ready payload on input[{client}]; "
                                "engines must send the full EngineCoreReadyResponse", clause="ECP-HS-12")
            if isinstance(payload, str):
                raise CaseFailure(f"ready payload on input[{client}] does not decode: {payload}")
            raw = decode_any(rec.registrations[client][0][0])
            missing = [k for k in required_ready_keys(fe.profile) if k not in raw]
            if missing:
                raise CaseFailure(f"ready payload lacks required keys {missing}")
            assert isinstance(payload, EngineCoreReadyResponse)
            if payload.max_model_len < 1:
                raise CaseFailure(f"ready payload max_model_len is {payload.max_model_len}")


@case("ENG-HS-4")
def test_ready_after_registration(engines):
    fe, records = _records(engines)
    for rec in records:
        if not rec.ready_raw:
            raise CaseFailure(f"identity {rec.identity.hex()} never sent READY")
        if rec.ready_error:
            raise CaseFailure(f"READY does not decode: {rec.ready_error}")
        if rec.anomalies:  # duplicate HELLO/READY, wrong frame counts on the handshake socket
            raise CaseFailure(f"identity {rec.identity.hex()}: handshake anomalies: {rec.anomalies}", clause="ECP-HS-7")
        if fe.evidence.late_handshake:
            raise CaseFailure(f"{len(fe.evidence.late_handshake)} handshake message(s) after READY", clause="ECP-HS-7")
        missing = set(range(len(fe.inputs))) - (rec.registered_at_ready or set())
        if missing:
            # ipc/tcp sockets are independent, so allow the registration to be in flight:
            # it must have arrived by the end of the handshake at the latest.
            late = [c for c in missing if c not in rec.registrations]
            if late:
                raise CaseFailure(f"READY came but no ready payload on input(s) {late}")


@case("ENG-HS-5")
def test_one_registration_per_input(engines):
    fe, records = _records(engines)
    # give a duplicate registration the chance to arrive
    fe.observe()
    for rec in records:
        for client, regs in rec.registrations.items():
            if len(regs) != 1:
                raise CaseFailure(f"identity {rec.identity.hex()} registered {len(regs)} times on input[{client}]")
        if rec.registration_anomalies:
            raise CaseFailure(f"identity {rec.identity.hex()}: {rec.registration_anomalies}")
    if fe.evidence.late_inputs:
        raise CaseFailure(f"{len(fe.evidence.late_inputs)} unexpected message(s) from the engine on an input socket")


@case("ENG-HS-6")
def test_multiple_clients(engines):
    with engines.fresh(clients=2, engine_count=1) as eut:
        fe = eut.fe
        for rec in fe.evidence.records.values():
            if sorted(rec.registrations) != [0, 1]:
                raise CaseFailure(f"registered on inputs {sorted(rec.registrations)}, expected [0, 1]",
                                clause="ECP-SOCK-3")
        for client in (0, 1):
            rid = fe.new_id(f"client{client}")
            fe.add(fe.request(rid, max_tokens=2, client=client))
            fe.wait_finished(rid, max_tokens=2)
            clients = {s.client for s in fe.seen(rid)}
            if clients != {client}:
                raise CaseFailure(f"outputs of {rid} (client_index={client}) arrived on outputs {sorted(clients)}",
                                clause="ECP-SOCK-4")
