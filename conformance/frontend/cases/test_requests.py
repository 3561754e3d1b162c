"""Frontend-role request cases: what the ADDs look like and where they go, how each input message is
framed, and that no id is sent twice while in flight."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable

import msgspec

from ecp.conformance.frontend.cases._common import (
    EXPECT_S, HELD_MAX_TOKENS, SHORT_MAX_TOKENS, adds_in_order, check_decode_errors, expect, held_script,
    open_held, program, unique,
)
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.frontend.sse import SseStream, drop_all
from ecp.conformance.outcomes import CaseTimeout
from ecp.conformance.registry import case
from ecp.spec import RequestType, decode_any, request_type_of



async def _two_requests(fe: FrontendUnderTest) -> dict[int, Any]:
    """A completion (max_tokens 3) and, if served, a chat (max_tokens 4); returns max_tokens -> reply."""
    replies = {3: await fe.driver.complete(unique("add"), 3)}
    if fe.caps and fe.caps.chat:
        replies[4] = await fe.driver.chat(unique("add chat"), 4)
    for max_tokens, reply in replies.items():
        expect(reply.status_code == 200,
               f"a request with max_tokens {max_tokens} failed with HTTP {reply.status_code}: {reply.text[:200]}")
    return replies


async def add_payload_decodes(m: FrontendManager) -> None:
    """FE-REQ-1."""
    fe = await m.shared()
    replies = await _two_requests(fe)
    check_decode_errors(fe)
    adds = adds_in_order(fe)
    expect(len(adds) == len(replies), f"{len(replies)} HTTP requests produced {len(adds)} ADDs")
    now = time.time()
    for rank, req in adds:
        sp = req.sampling_params
        expect(sp is not None and req.pooling_params is None,
               f"ADD {req.request_id!r}: exactly one of sampling_params/pooling_params must be set")
        invalid = sp.validation_errors()
        expect(not invalid, f"ADD {req.request_id!r} carries invalid sampling parameters: {invalid}")
        expect(sp.max_tokens in replies, f"ADD {req.request_id!r} carries max_tokens {sp.max_tokens}, "
                                         f"the HTTP requests asked for {sorted(replies)}")
        expect(req.request_id, "ADD with an empty request_id")
        expect(req.prompt_token_ids, f"ADD {req.request_id!r} has no prompt tokens")
        expect(abs(req.arrival_time - now) < 3600,
               f"ADD {req.request_id!r}: arrival_time {req.arrival_time} is not wall-clock seconds")
        expect(not req.abort_immediately, f"ADD {req.request_id!r} of an admitted request has abort_immediately")
    for max_tokens, reply in replies.items():
        choices = (reply.body or {}).get("choices") or []
        expect(choices and choices[0].get("finish_reason") == "length",
               f"the request with max_tokens {max_tokens} did not finish with 'length': {reply.text[:200]}")


async def client_index_and_wave(m: FrontendManager) -> None:
    """FE-REQ-2."""
    fe = await m.shared()
    await _two_requests(fe)
    for engine in fe.engines:
        clients = len(engine.init.addresses.inputs)
        for rec, req in engine.recorder.adds(include_notices=False):
            expect(0 <= req.client_index < clients,
                   f"ADD {req.request_id!r}: client_index {req.client_index} but INIT lists {clients} client(s)")
            expect(req.client_index == rec.client_index,
                   f"ADD {req.request_id!r} arrived on input {rec.client_index} but says client_index "
                   f"{req.client_index}: its outputs would go to another client")
            expect(req.current_wave >= 0, f"ADD {req.request_id!r}: current_wave {req.current_wave} < 0")


async def pinned_rank_reaches_engine(m: FrontendManager) -> None:
    """FE-REQ-3."""
    fe = await m.shared()
    for engine in fe.engines:
        before = {e.rank: len(e.recorder.adds(include_notices=False)) for e in fe.engines}
        reply = await fe.driver.complete(unique("pin"), SHORT_MAX_TOKENS,
                                         headers={"X-data-parallel-rank": str(engine.rank)})
        expect(reply.status_code == 200,
               f"a request pinned to rank {engine.rank} failed with HTTP {reply.status_code}: {reply.text[:200]}")
        for other in fe.engines:
            new = other.recorder.adds(include_notices=False)[before[other.rank]:]
            if other is engine:
                expect(len(new) == 1, f"engine {engine.rank} received {len(new)} ADDs for one request pinned to it")
                req = new[0][1]
                expect(req.data_parallel_rank == engine.rank,
                       f"the ADD pinned to rank {engine.rank} carries data_parallel_rank {req.data_parallel_rank}")
            else:
                expect(not new, f"a request pinned to rank {engine.rank} reached engine {other.rank}")
    # a rank the frontend does not serve: refused before any ADD, with a 400 (ECP-DP-2, ECP-HTTP-2)
    stray = fe.engine_count
    before = {e.rank: len(e.recorder.adds(include_notices=False)) for e in fe.engines}
    reply = await fe.driver.complete(unique("pin"), SHORT_MAX_TOKENS, headers={"X-data-parallel-rank": str(stray)})
    reached = [e.rank for e in fe.engines if len(e.recorder.adds(include_notices=False)) > before[e.rank]]
    expect(not reached, f"a request pinned to rank {stray}, which the frontend does not serve (ranks "
                        f"0..{stray - 1}), reached engine(s) {reached}")
    expect(reply.status_code == 400, f"a request pinned to rank {stray}, which the frontend does not serve, was "
                                     f"answered HTTP {reply.status_code}, not 400: {reply.text[:200]}")


async def load_spreads(m: FrontendManager) -> None:
    """FE-REQ-4."""
    fe = await m.shared()
    fe.require_engines(2)
    program(fe, held_script())
    streams = await open_held(fe, 4 * fe.engine_count)
    try:
        counts = {e.rank: len(e.generation.active) for e in fe.engines}
        expect(all(counts.values()), f"{sum(counts.values())} concurrent requests were routed {counts}: "
                                     f"some engine got none")
    finally:
        drop_all(streams)

def _input_count(fe: FrontendUnderTest) -> int:
    return sum(len(e.recorder.inputs()) for e in fe.engines)


async def _reaches_engines(fe: FrontendUnderTest, request: Awaitable[Any], what: str) -> asyncio.Future:
    """Send ``request`` (an HTTP call) and return its task once an engine received something from it,
    decodable or not: a frontend whose messages no engine can read is judged on them, not left to
    time out waiting for an answer."""
    before = _input_count(fe)
    task = asyncio.ensure_future(request)
    try:
        await fe.until(lambda: _input_count(fe) > before or task.done(), EXPECT_S, f"{what} to reach an engine")
    except BaseException:
        task.cancel()
        raise
    return task


async def _settle(task: asyncio.Future) -> Any:
    """Clean up after ``task``: cancel it if it still waits (its frontend could not be served); its
    result or exception."""
    if not task.done():
        task.cancel()
    result = await asyncio.gather(task, return_exceptions=True)
    return result[0]


async def _answer(fe: FrontendUnderTest, request: Awaitable[Any], what: str) -> Any:
    """Send ``request``, judge what reached the engines from it (:func:`check_decode_errors`), then
    return its HTTP answer."""
    task = await _reaches_engines(fe, request, what)
    try:
        check_decode_errors(fe)
        return await task
    finally:
        await _settle(task)


async def input_type_bytes(m: FrontendManager) -> None:
    """FE-REQ-5: an ADD, an ABORT (a dropped stream) and, with the dev endpoints, a UTILITY; every
    input message is read by ecp.spec's decoder, whose errors cite ECP-FRAME-1 for a wrong type
    byte or frame count."""
    fe = await m.shared()
    program(fe, held_script())
    opened = await _reaches_engines(fe, fe.driver.stream_completion(unique("frame1"), HELD_MAX_TOKENS),
                                    "the streaming request's ADD")
    try:
        check_decode_errors(fe)
        stream = await opened
        expect(stream.status_code == 200, f"a streaming completion answered HTTP {stream.status_code}")
        await stream.first_token(EXPECT_S)
        held = [(e, rid) for e in fe.engines for rid in e.generation.active]
        stream.drop()
        await fe.until(lambda: all(rid in e.generation.aborted_ids for e, rid in held), EXPECT_S,
                       "the ABORT of the dropped stream")
    finally:
        stream = await _settle(opened)
        if isinstance(stream, SseStream):
            stream.drop()
    kinds = {RequestType.ADD: "ADD", RequestType.ABORT: "ABORT"}
    if fe.caps and fe.caps.dev_endpoints:
        reply = await _answer(fe, fe.driver.request("GET", "/is_sleeping"), "GET /is_sleeping's UTILITY")
        expect(reply.ok, f"GET /is_sleeping answered HTTP {reply.status_code}: {reply.text[:200]}")
        kinds[RequestType.UTILITY] = "UTILITY"
    check_decode_errors(fe)
    seen = {request_type_of(r.message) for e in fe.engines for r in e.recorder.inputs() if r.message is not None}
    missing = [name for kind, name in kinds.items() if kind not in seen]
    expect(not missing, f"the engines received no {', '.join(missing)} although the case drove one")


async def full_length_add(m: FrontendManager) -> None:
    """FE-REQ-6."""
    fe = await m.shared()
    await _two_requests(fe)
    adds = [(e.rank, rec) for e in fe.engines for rec, _ in e.recorder.adds()]
    expect(adds, "no ADD reached an engine")
    length = len(m.release.layout.messages["EngineCoreRequest"].fields)
    for rank, rec in adds:
        raw = decode_any(rec.frames[1])
        expect(isinstance(raw, list) and len(raw) == length,
               f"engine {rank}: an ADD's EngineCoreRequest is {type(raw).__name__} of "
               f"{len(raw) if isinstance(raw, list) else '?'} elements (header {bytes(rec.frames[1][:3]).hex()}); "
               f"senders of {m.release.label} write all {length} fields")


async def no_duplicate_in_flight_ids(m: FrontendManager) -> None:
    """FE-REQ-7: two requests with the same X-Request-Id while the first is held at its engine."""
    fe = await m.shared()
    program(fe, held_script())
    headers = {"X-Request-Id": unique("dup")}
    tasks = [await _reaches_engines(fe, fe.driver.stream_completion(unique("dup one"), HELD_MAX_TOKENS, headers),
                                    "the first request's ADD")]
    try:
        check_decode_errors(fe)
        [(first_rank, first)] = [(e.rank, rid) for e in fe.engines for rid in e.generation.active]
        second = asyncio.ensure_future(fe.driver.stream_completion(unique("dup two"), HELD_MAX_TOKENS, headers))
        tasks.append(second)
        try:   # the second request reaches an engine, or the frontend answers it (a refusal)
            await fe.until(lambda: len(adds_in_order(fe)) > 1 or second.done(), EXPECT_S,
                           "the second request to reach an engine or be answered")
        except CaseTimeout:
            pass   # neither: the frontend holds it; what matters is what reached the engines
        dups = [(e.rank, req.request_id) for e in fe.engines for _, req in e.recorder.adds()
                if req.request_id == first]
        expect(len(dups) == 1, f"two requests with X-Request-Id {headers['X-Request-Id']!r}: the frontend sent "
                               f"ADDs with the id {first!r} to engines {[r for r, _ in dups]} while the first "
                               f"(at engine {first_rank}) was still running")
    finally:
        for task in tasks:
            stream = await _settle(task)
            if isinstance(stream, SseStream):
                stream.drop()


async def sampling_params_map(m: FrontendManager) -> None:
    """FE-REQ-8."""
    fe = await m.shared()
    reply = await _answer(fe, fe.driver.complete(unique("spmap"), 3), "the completion's ADD")
    expect(reply.ok, f"a completion answered HTTP {reply.status_code}: {reply.text[:200]}")
    sp_at = m.release.layout.messages["EngineCoreRequest"].field("sampling_params").index
    for engine in fe.engines:
        for rec, req in engine.recorder.adds(include_notices=False):
            raw = decode_any(rec.frames[1])[sp_at]
            expect(isinstance(raw, dict) and all(isinstance(k, str) for k in raw),
                   f"engine {engine.rank}: ADD {req.request_id!r} carries SamplingParams as "
                   f"{type(raw).__name__} {str(raw)[:120]}; it is a map keyed by field name")
            sp = req.sampling_params
            expect(sp is not None and sp.max_tokens == 3 and sp.temperature == 0.0,
                   f"engine {engine.rank}: ADD {req.request_id!r} reads as max_tokens "
                   f"{getattr(sp, 'max_tokens', None)}, temperature {getattr(sp, 'temperature', None)}; the "
                   f"request asked for 3 and 0.0")


@case("FE-REQ-1")
def test_add_payload_decodes(frontends):
    frontends.run(add_payload_decodes)


@case("FE-REQ-2")
def test_client_index_and_wave(frontends):
    frontends.run(client_index_and_wave)


@case("FE-REQ-3")
def test_pinned_rank_reaches_engine(frontends):
    frontends.run(pinned_rank_reaches_engine)


@case("FE-REQ-4")
def test_load_spreads(frontends):
    frontends.run(load_spreads)


@case("FE-REQ-5")
def test_input_type_bytes(frontends):
    frontends.run(input_type_bytes)


@case("FE-REQ-6")
def test_full_length_add(frontends):
    frontends.run(full_length_add)


@case("FE-REQ-7")
def test_no_duplicate_in_flight_ids(frontends):
    frontends.run(no_duplicate_in_flight_ids)


@case("FE-REQ-8")
def test_sampling_params_map(frontends):
    frontends.run(sampling_params_map)
