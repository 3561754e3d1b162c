"""Frontend-role request cases: what the ADDs look like and where they go."""

from __future__ import annotations

import time
from typing import Any

from ecp.conformance.frontend.cases._common import (
    SHORT_MAX_TOKENS, adds_in_order, check_decode_errors, expect, held_script, open_held, program, unique,
)
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.frontend.sse import drop_all
from ecp.conformance.registry import case


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
