"""Cross-version wire tests: encode with one release's layout, decode with another's.

The generic, layout-driven decoder is checked against the real one: bytes
written with any shipped layout must be refused by :mod:`ecp.spec.codec`
(the vLLM 0.33 decoder) exactly when the generic check with the 0.33 layout
says ``rejected``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ecp.spec import codec
from ecp.spec.diff.compat import compat_matrix, render_markdown
from ecp.spec.errors import ProtocolError
from ecp.spec.layout import wire
from ecp.spec.layout.resolve import load_shipped, shipped_names

ROOT = Path(__file__).resolve().parents[2]
RELEASES = shipped_names()


def _decode_with_codec(message: str, data: bytes):
    """Decode one payload the way a vLLM 0.33 peer built on ecp.spec does."""
    if message == "EngineCoreRequest":
        return codec.decode_input([b"\x00", data])
    if message == "UtilityRequest":
        return codec.decode_input([b"\x03", data])
    if message == "StartDPWave":
        return codec.decode_input([b"\x02", data])
    if message == "EngineCoreOutputs":
        return codec.decode_outputs([data])
    if message == "EngineCoreReadyResponse":
        return codec.decode_ready_response(data)
    if message == "EngineHandshakeMetadata":
        return codec.decode_init(data)
    if message in ("Hello", "Ready"):
        return codec.decode_handshake(data)
    raise AssertionError(message)


PAYLOADS = ["Hello", "EngineHandshakeMetadata", "EngineCoreReadyResponse", "Ready", "EngineCoreRequest",
            "UtilityRequest", "StartDPWave", "EngineCoreOutputs"]


SENT = [(s, m) for s in RELEASES for m in PAYLOADS if m in load_shipped(s).messages]


@pytest.mark.parametrize("sender,message", SENT)
@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_generic_check_agrees_with_the_0_33_codec(sender, message, mode):
    sending = load_shipped(sender)
    data = wire.encode(wire.sample(sending, message, mode))
    verdict = wire.worst(wire.check(load_shipped("vllm-0.33"), message, data, sending))
    try:
        _decode_with_codec(message, data)
        refused = None
    except ProtocolError as exc:
        refused = exc
    assert (verdict == "rejected") == (refused is not None), (verdict, refused)


def test_every_0_33_payload_is_covered():
    assert {m for s, m in SENT if s == "vllm-0.33"} == set(PAYLOADS)


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_reads_its_own_payloads_cleanly(release):
    layout = load_shipped(release)
    for message in layout.messages:
        for mode in ("full", "sparse"):
            issues = wire.check(layout, message, wire.encode(wire.sample(layout, message, mode)), layout)
            # only what the layout itself leaves undescribed may remain unchecked
            assert {i.kind for i in issues} <= {"unchecked"}, (message, issues)


def test_0_21_outputs_are_refused_by_a_0_33_frontend_and_vice_versa():
    old, new = load_shipped("vllm-0.21"), load_shipped("vllm-0.33")
    for sender, receiver in ((old, new), (new, old)):
        issues = wire.check(receiver, "EngineCoreOutputs",
                            wire.encode(wire.sample(sender, "EngineCoreOutputs", "sparse")), sender)
        assert wire.worst(issues) == "rejected"
        misaligned = [i.path for i in issues if i.kind == "misaligned"]
        assert misaligned[0].endswith(".ec_transfer_params" if receiver is new else ".trace_headers")
    # even the commonest output (one token, nothing optional set) fails: position 12 is an
    # int (num_nans_in_logits) for 0.21 and a tensor-or-nil (routed_experts) for 0.33
    with pytest.raises(ProtocolError):
        codec.decode_outputs([wire.encode(wire.sample(old, "EngineCoreOutputs", "sparse"))])


def test_requests_interoperate_both_ways_with_loss():
    old, new = load_shipped("vllm-0.21"), load_shipped("vllm-0.33")
    old_to_new = wire.check(new, "EngineCoreRequest", wire.encode(wire.sample(old, "EngineCoreRequest")), old)
    assert [str(i) for i in old_to_new if i.kind != "unchecked"] == [
        "defaulted at EngineCoreRequest: session_id, kv_hints"]
    request = codec.decode_input([b"\x00", wire.encode(wire.sample(old, "EngineCoreRequest", "sparse"))]).request
    assert request.session_id is None and request.kv_hints is None
    new_to_old = wire.check(old, "EngineCoreRequest", wire.encode(wire.sample(new, "EngineCoreRequest")), new)
    assert [str(i) for i in new_to_old if i.kind != "unchecked"] == [
        "dropped at EngineCoreRequest: 2 trailing element(s) ignored: session_id, kv_hints"]


def test_ready_payload_of_0_21_lacks_what_a_0_33_frontend_requires():
    old = load_shipped("vllm-0.21")
    data = wire.encode(wire.sample(old, "EngineCoreReadyResponse"))
    with pytest.raises(ProtocolError):
        codec.decode_ready_response(data)


def test_checked_in_compatibility_table_matches_the_command():
    # Regenerate with `ecp spec compat --out docs/compatibility.md`.
    layouts = [load_shipped(n) for n in RELEASES]
    assert (ROOT / "docs" / "compatibility.md").read_text() == render_markdown(layouts, compat_matrix(layouts))


def test_matrix_verdicts():
    layouts = [load_shipped(n) for n in RELEASES]
    results = {(r.frontend, r.engine): r.cells for r in compat_matrix(layouts)}
    same = results[("vllm-0.33", "vllm-0.33")]
    assert {c.verdict for c in same.values()} == {"ok"}
    old_fe = results[("vllm-0.21", "vllm-0.33")]
    assert old_fe["outputs"].verdict == "rejected"
    assert old_fe["ADD"].verdict == "lossy"
    assert old_fe["ready payload"].verdict == "lossy"
    assert old_fe["INIT"].verdict == "not-compared"
    new_fe = results[("vllm-0.33", "vllm-0.21")]
    assert new_fe["ready payload"].verdict == "rejected"
    assert new_fe["UTILITY methods"].verdict == "rejected"
    assert any("pause_generation" in n for n in new_fe["UTILITY methods"].notes)
    assert new_fe["type bytes"].verdict == "ok"
    # a frontend of the early V1 revision sends 0x02/0x03 as PROFILE/RESET_PREFIX_CACHE
    early_fe = results[("vllm-v1-0015f3f", "vllm-0.33")]
    assert early_fe["type bytes"].verdict == "rejected"
    assert early_fe["type bytes"].notes == [
        "0x02 means PROFILE to the frontend, START_DP_WAVE to the engine",
        "0x03 means RESET_PREFIX_CACHE to the frontend, UTILITY to the engine"]
    assert early_fe["UTILITY"].verdict == "absent" and early_fe["outputs"].verdict == "rejected"
