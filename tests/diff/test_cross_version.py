"""Cross-version wire tests: encode with one release's layout, decode with another's.

The generic, layout-driven decoder is checked against a real one: bytes
written with any shipped layout must be refused by :mod:`ecp.spec.codec`
exactly when the generic check with the layout of ecp.spec's own types
(``current``) says ``rejected``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ecp.spec import codec
from ecp.spec.diff.compat import compat_matrix, render_markdown
from ecp.spec.diff.observed import OBSERVED_PATH, load_observed, render_executed
from ecp.spec.errors import ProtocolError
from ecp.spec.layout import wire
from ecp.spec.layout.introspect import current_layout
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
def test_generic_check_agrees_with_the_codec(sender, message, mode):
    sending = load_shipped(sender)
    data = wire.encode(wire.sample(sending, message, mode))
    verdict = wire.worst(wire.check(current_layout(), message, data, sending))
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
    # a default the source declares against its own annotation (flagged by a default-mismatch
    # warning) makes the sparse sample unreadable by design; only full samples are checked there
    odd = {f"{w.split(': ')[2].split('.')[0]}" for w in layout.provenance.warnings if ": default-mismatch: " in w}
    for message in layout.messages:
        for mode in ("full",) if message in odd else ("full", "sparse"):
            issues = wire.check(layout, message, wire.encode(wire.sample(layout, message, mode)), layout)
            # only what the layout itself leaves undescribed may remain unchecked
            assert {i.kind for i in issues} <= {"unchecked"}, (message, issues)


def test_outputs_across_the_0_26_insertion_are_refused_both_ways():
    old, new = load_shipped("vllm-0.25"), load_shipped("vllm-0.26")
    for sender, receiver in ((old, new), (new, old)):
        issues = wire.check(receiver, "EngineCoreOutputs",
                            wire.encode(wire.sample(sender, "EngineCoreOutputs", "full")), sender)
        assert wire.worst(issues) == "rejected"
        misaligned = [i.path for i in issues if i.kind == "misaligned"]
        assert misaligned[0].endswith(".ec_transfer_params" if receiver is new else ".trace_headers")
    # the outputs of 0.25 do not decode with ecp.spec's 0.33 types either
    with pytest.raises(ProtocolError):
        codec.decode_outputs([wire.encode(wire.sample(old, "EngineCoreOutputs", "full"))])


def test_requests_interoperate_both_ways_with_loss():
    old, new = load_shipped("vllm-0.29"), load_shipped("vllm-0.31")
    old_to_new = wire.check(new, "EngineCoreRequest", wire.encode(wire.sample(old, "EngineCoreRequest")), old)
    assert wire.worst(old_to_new) in ("defaulted", "dropped", None)
    new_to_old = wire.check(old, "EngineCoreRequest", wire.encode(wire.sample(new, "EngineCoreRequest")), new)
    assert wire.worst(new_to_old) != "rejected"


def test_ready_payload_of_0_22_lacks_what_a_0_33_frontend_requires():
    data = wire.encode(wire.sample(load_shipped("vllm-0.22"), "EngineCoreReadyResponse"))
    issues = wire.check(load_shipped("vllm-0.33"), "EngineCoreReadyResponse", data)
    assert wire.worst(issues) == "rejected" and "block_size" in str(issues[0])
    with pytest.raises(ProtocolError):
        codec.decode_ready_response(data)


def test_checked_in_compatibility_table_matches_the_command():
    # Regenerate with `ecp spec compat --out docs/compatibility.md` (it reads the executed matrix,
    # spec/compat/observed-cross.json, written by `lab/interop_matrix.py --cross`).
    layouts = [load_shipped(n) for n in RELEASES]
    observed = load_observed(OBSERVED_PATH)
    assert (ROOT / "docs" / "compatibility.md").read_text() == render_markdown(layouts, compat_matrix(layouts),
                                                                               observed)
    # every ordered pair of the three releases ran, and the model agrees with every observation
    assert sorted(observed.pairs) == [(f, e) for f in observed.releases for e in observed.releases]
    assert all(p["started"] for p in observed.pairs.values())
    assert any("disagree in 0 cell(s)" in line for line in render_executed(layouts, observed))


def test_matrix_verdicts():
    layouts = [load_shipped(n) for n in RELEASES]
    results = {(r.frontend, r.engine): r.cells for r in compat_matrix(layouts)}
    assert len(results) == len(layouts) ** 2
    for name in RELEASES:
        assert {c.verdict for c in results[(name, name)].values()} == {"ok"}
    # 0.32 frontends reach 0.33 engines (profile's new argument has a default) ...
    assert {c.verdict for c in results[("vllm-0.32", "vllm-0.33")].values()} <= {"ok", "lossy"}
    # ... but 0.33 frontends call pause_generation and a 5-argument profile that 0.32 engines lack
    back = results[("vllm-0.33", "vllm-0.32")]["UTILITY methods"]
    assert back.verdict == "rejected"
    assert "pause_generation" in back.notes[0] and any(n.startswith("profile:") for n in back.notes)
    # the output field inserted in 0.26 splits the releases on both sides
    assert results[("vllm-0.25", "vllm-0.26")]["outputs"].verdict == "rejected"
    assert results[("vllm-0.26", "vllm-0.25")]["outputs"].verdict == "rejected"
    assert results[("vllm-0.24", "vllm-0.25")]["outputs"].verdict == "ok"
    # the required ready-payload keys of 0.23 reject older engines
    assert results[("vllm-0.23", "vllm-0.22")]["ready payload"].verdict == "rejected"
    assert results[("vllm-0.22", "vllm-0.23")]["ready payload"].verdict == "lossy"
    assert all(c["type bytes"].verdict == "ok" for c in results.values())
