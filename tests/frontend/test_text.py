"""Tokenizer streaming, stop strings, id conventions and the abort index (no IO)."""

from __future__ import annotations

import pytest

from ecp.reference.frontend import ids
from ecp.reference.frontend.choice import Choice, EngineRequestFailed
from ecp.reference.frontend.registry import InFlightIndex
from ecp.reference.frontend.stop_strings import StopStringMatcher
from ecp.reference.tokenizer import ByteTokenizer
from ecp.spec import EngineCoreOutput, FinishReason, RequestError


def test_byte_tokenizer_roundtrip_and_total_decoding():
    tok = ByteTokenizer()
    text = "héllo, wörld ✓"
    assert tok.decode(tok.encode(text)) == text
    # Special ids are skipped, ids beyond the byte range decode to printable ASCII.
    assert tok.decode([tok.BOS, tok.EOS, 0]) == ""
    assert tok.decode([259, 259 + 94, 259 + 95]) == " ~ "
    assert all(t >= 3 for t in tok.encode(text))


def test_streaming_decode_never_splits_a_utf8_character():
    tok = ByteTokenizer()
    stream = tok.decode_stream()
    ids_ = tok.encode("a✓b")  # ✓ is 3 bytes: it arrives in three separate steps
    pieces = [stream.step([i]) for i in ids_]
    assert pieces == ["a", "", "", "✓", "b"]
    assert stream.flush() == ""


def test_streaming_decode_equals_whole_decode_for_any_split():
    """Ids of every kind (special, bytes of multi-byte characters, past the byte range and past
    the vocabulary), fed in random pieces, stream to exactly what decoding them at once gives."""
    import random

    tok = ByteTokenizer(1000)
    rnd = random.Random(7)
    for _ in range(300):
        ids = [rnd.randrange(0, 1300) for _ in range(rnd.randrange(0, 30))]
        ids += [b + ByteTokenizer.OFFSET for b in "a€😀é".encode()]
        rnd.shuffle(ids)
        stream, text, i = tok.decode_stream(), "", 0
        while i < len(ids):
            k = rnd.randrange(1, 5)
            text += stream.step(ids[i:i + k])
            i += k
        assert text + stream.flush() == tok.decode(ids)


@pytest.mark.parametrize("deltas, stops, include, shown, matched", [
    (["hel", "lo wo", "rld"], ["world"], False, "hello ", "world"),
    (["hel", "lo wo", "rld"], ["world"], True, "hello world", "world"),
    (["abc", "def"], ["cd", "bcdx"], False, "ab", "cd"),
    (["xyz"], ["q"], False, "xyz", None),
    (["w", "o", "r", "l", "d!"], ["world"], False, "", "world"),
])
def test_stop_strings_across_deltas(deltas, stops, include, shown, matched):
    m = StopStringMatcher(stops, include)
    out = "".join(m.feed(d) for d in deltas) + m.flush()
    assert out == shown
    assert m.matched == matched


def test_stop_matcher_holds_back_only_a_possible_prefix_length():
    m = StopStringMatcher(["STOP"])
    assert m.feed("abcdef") == "abc"  # 3 = len("STOP") - 1 characters held back
    assert m.feed("g") == "d"
    assert m.flush() == "efg"


def test_request_id_conventions():
    assert ids.base_request_id("hdr", "body") == "hdr"
    assert ids.base_request_id(None, "body") == "body"
    rnd = ids.base_request_id(None, None)
    assert len(rnd) == 16 and int(rnd, 16) >= 0
    assert ids.response_id("completion", "x") == "cmpl-x"
    assert ids.response_id("chat", "x") == "chatcmpl-x"
    assert ids.external_id("completion", "cmpl-x", 2) == "cmpl-x-2"
    assert ids.external_id("chat", "chatcmpl-x", 0) == "chatcmpl-x"
    internal = ids.internal_id("cmpl-x-0")
    assert internal.startswith("cmpl-x-0-") and len(internal.rsplit("-", 1)[1]) == 8


def _choice(base: str, index: int, prompt_index: int = 0, stops=()) -> Choice:
    tok = ByteTokenizer()
    resp = ids.response_id("completion", base)
    ext = ids.external_id("completion", resp, prompt_index)
    return Choice(index=index, internal_id=ids.internal_id(ext), external_id=ext, response_id=resp,
                  base_id=base, prompt_token_ids=[5], detok=tok.decode_stream(),
                  stop=StopStringMatcher(list(stops)))


def test_index_matches_base_response_external_and_internal_ids():
    idx = InFlightIndex()
    a0, a1, b = _choice("a", 0, 0), _choice("a", 1, 1), _choice("b", 0)
    for c in (a0, a1, b):
        idx.add(c)
    for key, expected in [("a", [a0, a1]), ("cmpl-a", [a0, a1]), ("cmpl-a-1", [a1]),
                          (a0.internal_id, [a0]), ("b", [b])]:
        found, missing = idx.resolve([key])
        assert {c.internal_id for c in found} == {c.internal_id for c in expected} and not missing
    found, missing = idx.resolve(["a", "cmpl-a-0", "nope"])
    assert len(found) == 2 and missing == ["nope"]  # each choice once
    idx.remove(a0)
    idx.remove(a0)  # idempotent
    assert [c.internal_id for c in idx.resolve(["a"])[0]] == [a1.internal_id]
    assert len(idx) == 2


def test_choice_folds_outputs_and_reports_partial_results():
    tok = ByteTokenizer()
    c = _choice("p", 0, stops=["lo w"])
    d1 = c.apply(EngineCoreOutput(c.internal_id, tok.encode("hel")))
    assert d1.text == "" and not c.finished  # up to len("lo w") - 1 characters are held back
    d2 = c.apply(EngineCoreOutput(c.internal_id, tok.encode("lo world")))
    assert c.finished and c.finish_reason == "stop" and c.stop_reason == "lo w"
    assert d1.text + d2.text == "hel" == c.text
    assert c.apply(EngineCoreOutput(c.internal_id, tok.encode("x"))) is None  # ignored after the match
    part = c.partial_result()
    assert part["finish_reason"] == "abort" and part["token_ids"] == tok.encode("hello world")


def test_choice_abort_requested_freezes_the_partial_result():
    tok = ByteTokenizer()
    c = _choice("p", 0)
    c.apply(EngineCoreOutput(c.internal_id, tok.encode("ab")))
    c.abort_requested = True
    d = c.apply(EngineCoreOutput(c.internal_id, tok.encode("cd"), finish_reason=FinishReason.ABORT))
    assert d.finish_reason == "abort" and c.text == "ab" and c.token_ids == tok.encode("ab")


@pytest.mark.parametrize("held_back", ["incomplete character", "stop-string prefix"])
def test_choice_abort_requested_keeps_back_what_the_stream_held_back(held_back):
    """The abort APIs report the text shown so far; text still held back when the terminal
    output arrives (half a UTF-8 character, the start of a stop string) is not shown after it."""
    tok = ByteTokenizer()
    if held_back == "incomplete character":
        c, tail = _choice("p", 0), tok.encode("é")[:1]
    else:
        c, tail = _choice("p", 0, stops=["xyz"]), tok.encode("xy")
    shown = c.apply(EngineCoreOutput(c.internal_id, tok.encode("ab") + tail)).text
    assert shown == "ab" == c.text  # the tail is held back
    c.abort_requested = True
    part = c.partial_result()
    d = c.apply(EngineCoreOutput(c.internal_id, [], finish_reason=FinishReason.ABORT))
    assert d.finish_reason == "abort" and d.text == "" and c.text == part["text"] == "ab"


def test_choice_error_output_raises_typed_failure():
    c = _choice("p", 0)
    with pytest.raises(EngineRequestFailed) as ei:
        c.apply(EngineCoreOutput(c.internal_id, [], finish_reason=FinishReason.ERROR,
                                 error=RequestError("engine_paused", "paused", True)))
    assert ei.value.code == "engine_paused" and ei.value.retryable


def test_hf_tokenizer_json_streams_text(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from ecp.reference.tokenizer import load_tokenizer

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["hello world, hello frontend ✓"] * 20, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))

    hf = load_tokenizer(str(path))
    assert hf.eos_token_id == tok.token_to_id("</s>")
    text = "hello ✓ world"
    ids_ = hf.encode(text)
    assert hf.decode(ids_) == text
    stream = hf.decode_stream()
    assert "".join(stream.step([i]) for i in ids_) + stream.flush() == text


@pytest.mark.parametrize("last", ["token", "stop", "error"])
def test_a_backlog_folds_to_what_its_outputs_show_one_by_one(last):
    """ChoiceRun folds a backlog of outputs as one output (one detokenisation, one delta); the
    text, tokens, finish and metrics are those of folding them one by one."""
    import asyncio

    from ecp.reference.frontend.serving import ChoiceRun, Frontend, FrontendConfig

    tok = ByteTokenizer()
    pieces = ["h", "é", "", "llo", " w"]  # a 2-byte character split across outputs, an empty step

    def outputs(c: Choice) -> list[EngineCoreOutput]:
        outs = [EngineCoreOutput(c.internal_id, tok.encode(p)) for p in pieces]
        if last == "stop":
            outs.append(EngineCoreOutput(c.internal_id, tok.encode("!"), finish_reason=FinishReason.LENGTH))
        elif last == "error":
            outs.append(EngineCoreOutput(c.internal_id, [], finish_reason=FinishReason.ERROR,
                                         error=RequestError("boom", "engine failed")))
        return outs

    class Backlog:
        """A stream whose outputs arrive in the given batches, then ends."""

        def __init__(self, batches):
            self.batches = batches

        @property
        def finished(self):
            return not self.batches

        def take_nowait(self):
            return self.batches.pop(0) if self.batches else []

        async def wait(self):
            pass

    async def fold(batches_of) -> tuple:
        fe = Frontend(None, tok, FrontendConfig())
        c = _choice("p", 0)
        run = ChoiceRun(fe, c, Backlog(batches_of(outputs(c))))
        deltas, error = [], None
        try:
            while batch := await run.next_batch():
                deltas += batch
        except EngineRequestFailed as exc:
            error = exc.code
        run.close()
        itl = fe.metrics.itl
        shown = sum(1 for d in deltas if d.token_ids)
        return "".join(d.text for d in deltas), c.token_ids, c.finish_reason, error, sum(itl.counts), shown

    from ecp.reference.frontend.serving import _coalesce

    c = _choice("p", 0)
    coalesced, merged_away = _coalesce(outputs(c))
    assert len(coalesced) == (2 if last == "error" else 1) and merged_away == (4 if last == "stop" else 3)  # one per token output but the kept one
    assert coalesced[0].new_token_ids == tok.encode("héllo w" + ("!" if last == "stop" else ""))

    async def body():
        together = await fold(lambda outs: [outs])
        apart = await fold(lambda outs: [[o] for o in outs])
        assert together[:5] == apart[:5]
        assert together[5] == 1  # the whole backlog is one delta
        assert together[0] == "héllo w" + ("!" if last == "stop" else "")
        assert together[3] == ("boom" if last == "error" else None)

    asyncio.run(body())
