"""Engine-role security cases: code-carrying ext types are refused, never executed.

Each payload is a protocol-0 pickle that, if unpickled, calls
``builtins.open(MARKER, "w")`` and so creates a marker file in the harness's
work directory. The marker must never appear (``ECP-SEC-1``, interop level);
the engine must also keep serving (``ECP-ROB-1``, hardened level: vLLM 0.33's
engine core refuses these payloads but stops serving). (With ``--attach`` to an engine on another machine the
marker check proves nothing; run such engines locally for this case.)
"""

from pathlib import Path

import msgspec

from ecp.conformance.outcomes import FailedClosed, CaseFailure
from ecp.conformance.registry import case
from ecp.spec import decode_any
from ecp.spec.enums import EXT_CLOUDPICKLE, EXT_PICKLE

enc = msgspec.msgpack.encode


def marker_pickle(marker: Path) -> bytes:
    """Pickle opcodes for ``open(marker, 'w')`` -- written by hand, never produced by unpickling."""
    return b"cbuiltins\nopen\n(V" + str(marker).encode() + b"\nVw\ntR."


def _marker(engines, name: str) -> Path:
    path = Path(engines.cfg.workdir) / f"marker-{name}"
    if path.exists():
        path.unlink()
    return path


def _check(fe, markers, what: str, send, used=lambda: None) -> None:
    """``send()`` the refused payload(s); never executed (``ECP-SEC-1``, checked first), then still
    serving (``ECP-ROB-1``): an engine that refuses the payload by stopping -- failing closed or
    going silent -- keeps the first, interop-level requirement and breaks only the hardened one.
    The sends are inside the guard: an engine that stops at the first payload may make the second
    send fail, which is the same stop."""
    stopped: Exception | None = None
    try:
        send()
        fe.serves(after=what)
    except FailedClosed as exc:
        stopped = CaseFailure(f"{what} was refused, but the engine stopped: {exc}", clause="ECP-ROB-1")
    except CaseFailure as exc:
        stopped = exc
    created = [str(m) for m in markers if m.exists()]
    if created:
        raise CaseFailure(f"{what}: the engine EXECUTED a code-carrying payload: marker file(s) {created} exist")
    used()  # raises when the engine used the refused payload
    if stopped is not None:
        raise stopped


@case("ENG-SEC-1")
def test_pickle_refused(engine, engines):
    fe = engine
    m1, m2 = _marker(engines, "pickle-embeds"), _marker(engines, "pickle-abort")
    rid = fe.new_id("pickle")
    add = decode_any(fe.codec.encode_add(fe.request(rid, max_tokens=1))[1])
    add[9] = ["float32", [1], msgspec.msgpack.Ext(EXT_PICKLE, marker_pickle(m1))]  # prompt_embeds

    def send():
        fe.send_raw([b"\x00", enc(add)], decode=lambda: "(ADD with a pickle ext in prompt_embeds)")
        fe.send_raw([b"\x01", enc([msgspec.msgpack.Ext(EXT_PICKLE, marker_pickle(m2))])],
                    decode=lambda: "(ABORT with a pickle ext)")

    def used():
        if any(s.output.new_token_ids for s in fe.seen(rid)):
            raise CaseFailure(f"the engine served {rid}, whose prompt_embeds is a pickle ext: it decoded it")

    _check(fe, [m1, m2], "a pickle ext type (1)", send, used)


@case("ENG-SEC-2")
def test_cloudpickle_refused(engine, engines):
    fe = engine
    m = _marker(engines, "cloudpickle-args")
    payload = enc([0, 31337, "is_sleeping", [msgspec.msgpack.Ext(EXT_CLOUDPICKLE, marker_pickle(m))]])

    def used():
        if any(r.utility.failure_message is None for r in fe.replies.get(31337, [])):
            raise CaseFailure("a UTILITY call whose argument is a cloudpickle ext was executed successfully")

    _check(fe, [m], "a cloudpickle ext type (2)",
           lambda: fe.send_raw([b"\x03", payload], decode=lambda: "(UTILITY with a cloudpickle ext argument)"), used)


@case("ENG-SEC-3")
def test_unknown_ext_refused(engine):
    fe = engine
    rid = fe.new_id("ext42")
    add = decode_any(fe.codec.encode_add(fe.request(rid, max_tokens=1))[1])
    add[9] = ["float32", [1], msgspec.msgpack.Ext(42, b"\x00\x00\x80\x3f")]

    def used():
        if any(s.output.new_token_ids for s in fe.seen(rid)):
            raise CaseFailure(f"the engine served {rid} whose prompt_embeds uses unknown ext type 42")

    _check(fe, [], "an unknown ext type (42)",
           lambda: fe.send_raw([b"\x00", enc(add)], decode=lambda: "(ADD with ext type 42)"), used)
