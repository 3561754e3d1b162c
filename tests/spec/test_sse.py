"""The one SSE reader: events come out the same however the body is split."""

from __future__ import annotations

from ecp.spec.sse import SseDecoder, SseEvent

BODY = (b": keep-alive comment\r\n"
        b"data: {\"a\": 1}\r\n\r\n"
        b"event: note\rdata:two\rdata: lines\r\r"
        b"id: 7\n\n"                      # no data: not dispatched
        b"data: [DONE]\n\n")
EVENTS = [SseEvent(b'{"a": 1}'), SseEvent(b"two\nlines", b"note"), SseEvent(b"[DONE]")]


def test_whole_body():
    assert SseDecoder().feed(BODY) == EVENTS


def test_every_split_point_and_byte_by_byte():
    for cut in range(len(BODY) + 1):
        decoder = SseDecoder()
        assert decoder.feed(BODY[:cut]) + decoder.feed(BODY[cut:]) == EVENTS, cut
    decoder = SseDecoder()
    assert [e for i in range(len(BODY)) for e in decoder.feed(BODY[i:i + 1])] == EVENTS


def test_an_event_is_held_until_its_blank_line():
    decoder = SseDecoder()
    assert decoder.data(b"data: x\n") == []
    assert decoder.data(b"\n") == [b"x"]
