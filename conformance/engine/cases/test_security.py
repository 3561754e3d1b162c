"""Engine-role security cases: code-carrying ext types are refused, never executed.

Each payload is a protocol-0 pickle that, if unpickled, calls
``builtins.open(MARKER, "w")`` and so creates a marker file in the harness's
work directory. The case passes only if the engine keeps serving and the
marker never appears. (With ``--attach`` to an engine on another machine the
marker check proves nothing; run such engines locally for this case.)
"""

from pathlib import Path

import msgspec

from ecp.conformance.outcomes import Violation
from ecp.conformance.registry import case
from ecp.spec import decode_any, encode_add
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


def _check(fe, markers, what: str) -> None:
    fe.serves(after=what)
    created = [str(m) for m in markers if m.exists()]
    if created:
        raise Violation(f"{what}: the engine EXECUTED a code-carrying payload: marker file(s) {created} exist")


@case("ENG-SEC-1")
def test_pickle_refused(engine, engines):
    fe = engine
    m1, m2 = _marker(engines, "pickle-embeds"), _marker(engines, "pickle-abort")
    rid = fe.new_id("pickle")
    add = decode_any(encode_add(fe.request(rid, max_tokens=1))[1])
    add[9] = ["float32", [1], msgspec.msgpack.Ext(EXT_PICKLE, marker_pickle(m1))]  # prompt_embeds
    fe.send_raw([b"\x00", enc(add)], decode=lambda: "(ADD with a pickle ext in prompt_embeds)")
    fe.send_raw([b"\x01", enc([msgspec.msgpack.Ext(EXT_PICKLE, marker_pickle(m2))])],
                decode=lambda: "(ABORT with a pickle ext)")
    _check(fe, [m1, m2], "a pickle ext type (1)")
    for s in fe.seen(rid):
        if s.output.new_token_ids:
            raise Violation(f"the engine served {rid}, whose prompt_embeds is a pickle ext: it decoded it")


@case("ENG-SEC-2")
def test_cloudpickle_refused(engine, engines):
    fe = engine
    m = _marker(engines, "cloudpickle-args")
    payload = enc([0, 31337, "is_sleeping", [msgspec.msgpack.Ext(EXT_CLOUDPICKLE, marker_pickle(m))]])
    fe.send_raw([b"\x03", payload], decode=lambda: "(UTILITY with a cloudpickle ext argument)")
    _check(fe, [m], "a cloudpickle ext type (2)")
    for r in fe.replies.get(31337, []):
        if r.utility.failure_message is None:
            raise Violation("a UTILITY call whose argument is a cloudpickle ext was executed successfully")


@case("ENG-SEC-3")
def test_unknown_ext_refused(engine):
    fe = engine
    rid = fe.new_id("ext42")
    add = decode_any(encode_add(fe.request(rid, max_tokens=1))[1])
    add[9] = ["float32", [1], msgspec.msgpack.Ext(42, b"\x00\x00\x80\x3f")]
    fe.send_raw([b"\x00", enc(add)], decode=lambda: "(ADD with ext type 42)")
    fe.serves(after="an unknown ext type")
    for s in fe.seen(rid):
        if s.output.new_token_ids:
            raise Violation(f"the engine served {rid} whose prompt_embeds uses unknown ext type 42")
