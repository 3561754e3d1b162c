"""Each --bug knob breaks exactly what it says (the conformance suite proves itself against them)."""

from __future__ import annotations

import zmq

from engine_rawfront import make_request

from ecp.spec import FinishReason, decode_any, encode_utility
from ecp.reference.engine import BUGS


def test_wrong_call_id(rig):
    fe, _ = rig.start(1, bug=["wrong-call-id"])
    fe.send(0, encode_utility(0, 41, "is_sleeping", []))
    assert fe.pump(lambda: [m for m in fe.messages[0] if m.utility_output])
    assert [m.utility_output.call_id for m in fe.messages[0] if m.utility_output] == [42]


def test_inconsistent_is_sleeping_differs_by_rank(rig):
    fe, _ = rig.start(2, bug=["inconsistent-is-sleeping"])
    assert fe.value(0, "is_sleeping") is False
    assert fe.value(1, "is_sleeping") is True


def test_reset_prefix_cache_fails(rig):
    fe, _ = rig.start(1, bug=["reset-prefix-cache-fails"])
    assert fe.value(0, "reset_prefix_cache", [False, False]) is False


def test_ignore_abort_immediately_runs_the_request(rig):
    fe, _ = rig.start(1, bug=["ignore-abort-immediately"])
    fe.add(0, make_request("ai", [0], max_tokens=1, abort_immediately=True))
    assert fe.wait_finished(["ai"])["ai"].finish_reason == FinishReason.LENGTH


def test_no_terminal_output(rig):
    fe, _ = rig.start(1, bug=["no-terminal-output"])
    fe.add(0, make_request("nt", max_tokens=3))
    assert fe.pump(lambda: len(fe.tokens("nt")) == 3)
    fe.quiet(0.05)
    assert fe.finished("nt") is None


def test_duplicate_and_tokens_after_finish(rig):
    fe, _ = rig.start(1, bug=["duplicate-output", "tokens-after-finish"])
    fe.add(0, make_request("du", max_tokens=2))
    assert fe.pump(lambda: sum(o.finish_reason is not None for o in fe.outputs_for("du")) == 2
                   and fe.outputs_for("du")[-1].finish_reason is None)
    outs = fe.outputs_for("du")
    assert outs[-1].new_token_ids  # a token after the end


def test_ignore_abort(rig):
    fe, _ = rig.start(1, bug=["ignore-abort"], step_time_ms=1)
    fe.add(0, make_request("ia", max_tokens=40))
    fe.pump(lambda: fe.tokens("ia"))
    fe.abort(0, ["ia"])
    assert fe.wait_finished(["ia"])["ia"].finish_reason == FinishReason.LENGTH


def test_crash_on_bad_frame_sends_engine_core_dead(rig):
    fe, handle = rig.start(1, bug=["crash-on-bad-frame"])
    fe.send(0, [b"\x09", b"\x90"])
    assert fe.pump(lambda: fe.dead())
    assert handle.wait(5) == [1]


def test_bare_utility_result_is_not_an_envelope(rig):
    fe, _ = rig.start(1, bug=["bare-utility-result"])
    fe.send(0, encode_utility(0, 5, "is_sleeping", []))
    assert fe.outputs[0].poll(5000, zmq.POLLIN)
    raw = decode_any(fe.outputs[0].recv())
    assert raw[4] == [5, None, False]  # vLLM's decoder rejects this (ECP-UTIL-2)


def test_wave_complete_to_client(rig):
    fe, _ = rig.start(1, coordinator=True, bug=["wave-complete-to-client"])
    fe.add(0, make_request("w", max_tokens=2))
    assert fe.pump(lambda: any(m.wave_complete is not None for m in fe.messages[0]))


def test_every_bug_is_documented():
    import pathlib

    doc = (pathlib.Path(__file__).parents[2] / "docs" / "engine.md").read_text()
    for name in BUGS:
        assert f"`{name}`" in doc, name
