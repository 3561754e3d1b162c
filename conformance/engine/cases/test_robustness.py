"""Engine-role robustness cases: bad frames must never kill the engine.

These run after the functional cases (module order); each bad message is
followed by a liveness probe, and the plugin reports CRASH when the engine
process died.
"""

import msgspec

from ecp.conformance.outcomes import CaseFailure
from ecp.conformance.registry import case
from ecp.spec import FinishReason, decode_any

enc = msgspec.msgpack.encode


def _add_payload(fe, rid: str) -> bytes:
    return fe.codec.encode_add(fe.request(rid, max_tokens=2))[1]


def _each_survived(fe, messages, what: str) -> None:
    earlier = set(fe.refused_call_ids)
    for label, frames in messages:
        fe.send_raw(frames, decode=lambda: "(deliberately malformed)")
        fe.serves(after=f"{what}: {label}")
    # a malformed UTILITY whose call id is recoverable may be answered with its failure, or dropped;
    # never with a result (the engine inputs in order: the probes above came after it)
    executed = [cid for cid in fe.refused_and_executed() if cid not in earlier]
    if executed:
        raise CaseFailure(f"malformed UTILITY call(s) {executed} were answered with a result; a refused call is "
                        "answered with failure_message or not at all", clause="ECP-ROB-1")


@case("ENG-ROB-1")
def test_unknown_type_byte(engine):
    fe = engine
    _each_survived(fe, [
        ("type 0x7f", [b"\x7f", fe.codec.encode_abort(["x"])[1]]),
        ("type 0x04 (EXECUTOR_FAILED, engine-internal)", [b"\x04", b"\x90"]),
        ("type 0x05 (WAKEUP, engine-internal)", [b"\x05", b"\x90"]),
        ("two-byte type frame", [b"\x00\x00", _add_payload(fe, fe.new_id("twobyte"))]),
        ("empty type frame", [b"", fe.codec.encode_abort(["x"])[1]]),
    ], "an unknown request type")


@case("ENG-ROB-2")
def test_wrong_frame_count(engine):
    fe = engine
    _each_survived(fe, [
        ("ADD without payload", [b"\x00"]),
        ("UTILITY without payload", [b"\x03"]),
        ("ABORT with a surplus frame", [*fe.codec.encode_abort(["x"]), b"surplus"]),
        ("UTILITY with two surplus frames", [*fe.codec.encode_utility(0, 9, "is_sleeping"), b"a", b"b"]),
    ], "a wrong frame count")


@case("ENG-ROB-3")
def test_truncated_msgpack(engine):
    fe = engine
    full = _add_payload(fe, fe.new_id("trunc"))
    _each_survived(fe, [
        ("ADD cut in half", [b"\x00", full[: len(full) // 2]]),
        ("ADD missing its last byte", [b"\x00", full[:-1]]),
        ("empty ADD payload", [b"\x00", b""]),
        ("invalid marker 0xc1", [b"\x00", b"\xc1"]),
        ("UTILITY cut short", [b"\x03", fe.codec.encode_utility(0, 7, "is_sleeping")[1][:5]]),
        ("ABORT with trailing garbage", [b"\x01", fe.codec.encode_abort(["x"])[1] + b"\xff\xff"]),
    ], "truncated msgpack")


@case("ENG-ROB-4")
def test_wrong_types(engine):
    fe = engine
    add = decode_any(_add_payload(fe, fe.new_id("types")))
    int_id = list(add)
    int_id[0] = 12345
    short = list(add)[:8]
    _each_survived(fe, [
        ("ADD with an int request_id", [b"\x00", enc(int_id)]),
        ("ADD with 8 elements", [b"\x00", enc(short)]),
        ("ADD that is a map", [b"\x00", enc({"request_id": "x"})]),
        ("ABORT that is a map", [b"\x01", enc({"ids": ["x"]})]),
        ("ABORT of ints", [b"\x01", enc([1, 2, 3])]),
        ("UTILITY with a str client_index", [b"\x03", enc(["zero", 1, "is_sleeping", []])]),
        ("UTILITY with a negative call_id", [b"\x03", enc([0, -5, "is_sleeping", []])]),
        ("UTILITY with args that are a str", [b"\x03", enc([0, 11, "is_sleeping", "args"])]),
        ("START_DP_WAVE that is a str", [b"\x02", enc("wave")]),
    ], "a wrongly typed payload")


@case("ENG-ROB-5")
def test_huge_declared_lengths(engine):
    fe = engine
    _each_survived(fe, [
        ("array32 declaring 2**32-1 elements", [b"\x00", b"\xdd\xff\xff\xff\xff\xc0\xc0"]),
        ("map32 declaring 2**32-1 entries", [b"\x03", b"\xdf\xff\xff\xff\xff\xc0\xc0"]),
        ("str32 declaring 2 GiB", [b"\x01", b"\x91\xdb\x7f\xff\xff\xff" + b"x" * 16]),
        ("bin32 declaring 4 GiB", [b"\x01", b"\x91\xc6\xff\xff\xff\xff" + b"x" * 16]),
        ("ext32 declaring 4 GiB", [b"\x00", b"\xc9\xff\xff\xff\xff\x03" + b"x" * 16]),
        ("100,000 nested arrays", [b"\x01", b"\x91" * 100_000 + b"\xc0"]),
    ], "a huge declared length")


@case("ENG-ROB-6")
def test_client_index_out_of_range(engine):
    fe = engine
    rid = fe.new_id("nowhere")
    req = msgspec.structs.replace(fe.request(rid, max_tokens=2), client_index=7)
    fe.send_raw(fe.codec.encode_add(req), client=0)
    fe.serves(after="an ADD with client_index 7 (one client)")
    fe.send_raw(fe.codec.encode_utility(7, 4242, "is_sleeping"), client=0)
    fe.serves(after="a UTILITY with client_index 7 (one client)")
    if fe.seen(rid) and any(s.client != 0 for s in fe.seen(rid)):
        raise CaseFailure("outputs for an unroutable client_index arrived on another client's socket",
                        clause="ECP-SOCK-4")
    # a negative client_index names no socket either; -1 is the coordinator's index inside an engine,
    # and nothing of a client's request may go there (ECP-ROB-4.2)
    negative = fe.new_id("negative-client")
    fe.send_raw(fe.codec.encode_add(msgspec.structs.replace(fe.request(negative, max_tokens=2), client_index=-1)),
                client=0)
    fe.serves(after="an ADD with client_index -1")
    fe.observe()
    if any(s.client != 0 for s in fe.seen(negative)) or any(
            o.request_id == negative for m in fe.coordinator_messages for o in m.outputs):
        raise CaseFailure("outputs for an ADD with client_index -1 went to another socket than the output of the "
                        "input it came in on", clause="ECP-ROB-4")


@case("ENG-ROB-7")
def test_invalid_add_answered(engine):
    fe = engine
    rid = fe.new_id("typed-wrong")
    add = decode_any(_add_payload(fe, rid))
    add[3]["temperature"] = "hot"  # wrong type deep inside; the request id is intact
    fe.send_raw([b"\x00", enc(add)], decode=lambda: "(deliberately mistyped ADD)")
    # engines handle input in order: once a later probe finished, an answer would have been sent
    fe.serves(after="a mistyped ADD")
    fe.observe()
    if not fe.terminals(rid):
        raise CaseFailure(f"an ADD with a recoverable id ({rid}) but a mistyped field got no ERROR output")
    if fe.terminals(rid)[0].output.finish_reason != FinishReason.ERROR:
        raise CaseFailure(f"mistyped ADD {rid} ended with {fe.terminals(rid)[0].output.finish_reason!r}, "
                        "expected ERROR")
    error = fe.terminals(rid)[0].output.error
    if error is not None and error.retryable is not False:
        raise CaseFailure(f"the ERROR for mistyped ADD {rid} says retryable: {error.retryable!r}; the same ADD "
                        "would be refused again, so it must say false", clause="ECP-OUT-5")
    # an array shorter than 12 has no client_index (element 11): the answer goes to outputs[i] of the
    # inputs[i] the ADD came in on, never back on the input socket (ECP-ROB-2.2, ECP-HS-3.2)
    short_id = fe.new_id("short-wrong")
    short = decode_any(_add_payload(fe, short_id))[:10]
    short[3]["temperature"] = "hot"
    fe.send_raw([b"\x00", enc(short)], client=0, decode=lambda: "(deliberately mistyped 10-element ADD)")
    fe.serves(after="a mistyped 10-element ADD")
    fe.observe()
    answers = fe.terminals(short_id)
    if not answers:
        raise CaseFailure(f"a 10-element ADD ({short_id}, no client_index) with a recoverable id but a mistyped "
                        "field got no ERROR output on outputs[0], the output of the input it came in on")
    if answers[0].client != 0 or answers[0].output.finish_reason != FinishReason.ERROR:
        raise CaseFailure(f"the 10-element mistyped ADD {short_id}, sent on input[0], was answered with "
                        f"{answers[0].output.finish_reason!r} on output[{answers[0].client}]; expected ERROR on "
                        "output[0]")


#: how long an engine may take from SIGTERM to its exit (a real engine core tears down workers)
SHUTDOWN_S = 30.0
#: how long outputs an engine sent just before its exit may take to reach the harness
DRAIN_AFTER_EXIT_S = 2.0


@case("ENG-ROB-8")
def test_graceful_shutdown(engines):
    import time

    from ecp.conformance.engine.cases._common import start_long
    from ecp.conformance.engine.harness_frontend import EngineStoppedReading
    from ecp.conformance.outcomes import CaseTimeout

    with engines.dedicated() as eut:
        fe = eut.fe
        started = start_long(fe, "shutdown", count=2)
        rids = [rid for rid, _ in started]
        eut.handle.terminate()
        fe.alive_check = None  # its exit is what this case waits for, not a crash
        fe.deadline = None if fe.deadline is None else max(fe.deadline, time.monotonic() + SHUTDOWN_S)
        try:
            fe.wait(lambda: all(fe.terminals(r) for r in rids) or eut.handle.exit_status() is not None,
                    SHUTDOWN_S, f"terminal outputs for {rids} or the engine's exit after SIGTERM")
        except (CaseTimeout, EngineStoppedReading):
            pass  # judged below, with what did arrive
        status = eut.wait_exit(SHUTDOWN_S)
        # outputs sent just before the exit may still be on their way to the harness (a loaded
        # machine): wait for them a bounded while; an engine that sent them all costs nothing here
        try:
            fe.wait(lambda: all(fe.terminals(r) for r in rids), DRAIN_AFTER_EXIT_S,
                    f"terminal outputs for {rids} sent before the engine's exit")
        except (CaseTimeout, EngineStoppedReading):
            pass
        missing = [r for r in rids if not fe.terminals(r)]
        if missing:
            raise CaseFailure(f"after SIGTERM the engine {'exited' if status is not None else 'ran on'} without a "
                            f"terminal output for in-flight request(s) {missing}; it must finish or abort them "
                            "and send their outputs")
        if status is None:
            raise CaseFailure(f"the engine sent its outputs but was still running {SHUTDOWN_S:.0f}s after SIGTERM")
        if status != 0:
            raise CaseFailure(f"the engine exited with status {status} after SIGTERM; a graceful shutdown exits 0")
