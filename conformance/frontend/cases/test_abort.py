"""Frontend-role abort cases: burst coalescing, prompt auto-abort, explicit aborts, stop strings.

The burst of each size runs once per shared launch; its exact-ids case and
its coalescing case judge the same burst.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from ecp.conformance.frontend.cases._burst import burst_coalesced, burst_exact_ids
from ecp.conformance.frontend.cases._common import (
    EXPECT_S, HELD_MAX_TOKENS, PROMPT_ABORT_S, expect, held_script, open_held, program,
)
from ecp.conformance.frontend.http_driver import abort_all, abort_by_ids
from ecp.conformance.frontend.script import EngineScript
from ecp.conformance.frontend.session import FrontendManager
from ecp.conformance.frontend.sse import SseStream, drop_all
from ecp.conformance.outcomes import CaseTimeout, CaseFailure
from ecp.conformance.registry import case


#: How many times FE-ABORT-8/9 make their abort call to a frontend of several API server processes.
ABORT_ATTEMPTS = 6


async def _until_some_process_acts(fe, call, acted, what: str) -> tuple[bool, list[str], int]:
    """Make the explicit abort ``call(new_connection)`` until ``acted()`` holds.

    A frontend made of several API server processes (its INIT lists several clients) aborts what the
    process that received the call knows (ECP-ABORT-8 sentence 3), and each new connection goes to
    whichever process accepts it: the call is repeated, each time on a new connection, until one
    reaches a process that acts, at most ``ABORT_ATTEMPTS`` times. A frontend of one client gets one
    call. Returns whether it acted, the answers ("HTTP 200 '...'") and how many calls were allowed."""
    init = fe.engines[0].init
    clients = len(init.addresses.inputs) if init is not None else 1
    attempts = ABORT_ATTEMPTS if clients > 1 else 1
    answers: list[str] = []
    for attempt in range(attempts):
        reply = await call(clients > 1)
        expect(reply.ok, f"POST {fe.require_abort_api().path} answered HTTP {reply.status_code}: {reply.text[:200]}")
        answers.append(f"HTTP {reply.status_code} {reply.text[:80]!r}")
        try:
            await fe.until(acted, EXPECT_S if attempt == 0 else PROMPT_ABORT_S, what)
            return True, answers, attempts
        except CaseTimeout:
            continue
    return False, answers, attempts


def _calls_made(attempts: int) -> str:
    return f" ({attempts} calls on new connections: the frontend has several clients)" if attempts > 1 else ""


async def single_drop_aborted_promptly(m: FrontendManager) -> None:
    """FE-ABORT-7."""
    fe = await m.shared()
    program(fe, held_script())
    streams = await open_held(fe, 1)
    (rid, engine), = [(rid, e) for e in fe.engines for rid in e.generation.active]
    drop_all(streams)
    t_drop = time.monotonic()
    try:
        await fe.until(lambda: rid in engine.generation.aborted_ids, EXPECT_S, "the ABORT of one dropped stream")
    except CaseTimeout:
        raise CaseFailure(f"a dropped stream ({rid!r}) was not aborted within {EXPECT_S:.0f} s") from None
    t_abort = next(rec.t for rec, ids in engine.recorder.aborts() if rid in ids)
    expect(t_abort - t_drop <= PROMPT_ABORT_S,
           f"a lone dropped stream was aborted {t_abort - t_drop:.2f} s after the drop (limit {PROMPT_ABORT_S} s)")


async def _abort_stream_ends(stream: SseStream, what: str) -> None:
    end = await stream.read_to_end(EXPECT_S)
    expect(not end.timed_out, f"{what}: the stream did not end within {EXPECT_S:.0f} s of the abort")
    expect("abort" in end.finish_reasons,
           f"{what}: the stream ended without finish_reason 'abort' (finish reasons {end.finish_reasons}, "
           f"error events {end.error_events[:1]})")


async def explicit_abort_by_id(m: FrontendManager) -> None:
    """FE-ABORT-8."""
    fe = await m.shared()
    api = fe.require_abort_api()
    program(fe, held_script())
    chat = bool(fe.caps and fe.caps.chat)   # chat response ids are external ids in every frontend
    target = (await open_held(fe, 1, chat=chat))[0]
    (target_rid, target_engine), = [(rid, e) for e in fe.engines for rid in e.generation.active]
    bystander = (await open_held(fe, 1, chat=chat))[0]
    try:
        expect(target.response_id, "the stream carried no response id to abort by")
        acted, answers, attempts = await _until_some_process_acts(
            fe, lambda new: abort_by_ids(fe.driver, api, [target.response_id], new_connection=new),
            lambda: target_rid in target_engine.generation.aborted_ids,
            "the ABORT of the request named in the abort call")
        if not acted:
            raise CaseFailure(f"POST {api.path} {json.dumps(api.ids_body([target.response_id]))} answered "
                            f"{'; '.join(answers)} but sent no ABORT for {target_rid!r} to engine "
                            f"{target_engine.rank}" + _calls_made(attempts))
        await _abort_stream_ends(target, "explicitly aborted stream")
        bystanders = [rid for e in fe.engines for rid in e.generation.aborted_ids if rid != target_rid]
        expect(not bystanders, f"aborting one request also aborted {bystanders}")
    finally:
        drop_all([target, bystander])


async def explicit_abort_all(m: FrontendManager) -> None:
    """FE-ABORT-9.

    "All" is what the process that received the HTTP call knows: a frontend made of several API
    server processes (vLLM's Python frontend runs one per DP rank, each its own client with its own
    input socket) aborts the requests of that one client. So the requests that must be aborted are
    those of every client that sent an ABORT for the call, and at least one client must; a call that
    reached a process with no open request sends none, so it is repeated on new connections as
    FE-ABORT-8's is."""
    fe = await m.shared()
    api = fe.require_abort_api()
    program(fe, held_script())
    streams = await open_held(fe, 2 * fe.engine_count)
    running = {e.rank: set(e.generation.active) for e in fe.engines}
    client_of = {req.request_id: rec.client_index for e in fe.engines for rec, req in e.recorder.adds()}
    before = {e.rank: len(e.recorder.aborts()) for e in fe.engines}

    def aborting() -> set[int | None]:
        return {rec.client_index for e in fe.engines for rec, _ in e.recorder.aborts()[before[e.rank]:]}

    def due() -> dict[int, set[str]]:
        clients = aborting()
        return {rank: {rid for rid in ids if client_of.get(rid) in clients} for rank, ids in running.items()}

    try:
        acted, answers, attempts = await _until_some_process_acts(
            fe, lambda new: abort_all(fe.driver, api, new_connection=new), lambda: bool(aborting()),
            "an ABORT after the abort-all call")
        sent = (f"POST {api.path} {json.dumps(dict(api.all_body))} (abort-all, ECP-HTTP-7) answered "
                f"{'; '.join(answers)}")
        if not acted:
            raise CaseFailure(f"{sent}, but the frontend sent no ABORT although "
                            f"{sum(map(len, running.values()))} requests were open" + _calls_made(attempts))
        try:
            await fe.until(lambda: all(due()[e.rank] <= e.generation.aborted_ids for e in fe.engines),
                           EXPECT_S, "ABORTs for every open request of the client that received the call")
        except CaseTimeout:
            left = {e.rank: sorted(due()[e.rank] - e.generation.aborted_ids) for e in fe.engines}
            raise CaseFailure(f"{sent}, but it left requests of client(s) {sorted(aborting())} running at "
                            f"their engines: {left}") from None
        aborted = sum(len(ids) for ids in due().values())
        ends = await asyncio.gather(*(s.read_to_end(EXPECT_S) for s in streams))
        ended = [e for e in ends if not e.timed_out]
        for i, end in enumerate(ended):
            expect("abort" in end.finish_reasons,
                   f"stream {i} ended after abort-all without finish_reason 'abort' (finish reasons "
                   f"{end.finish_reasons}, error events {end.error_events[:1]})")
        expect(len(ended) >= aborted, f"{aborted} requests were aborted at their engines but only {len(ended)} "
                                      f"of {len(streams)} streams ended within {EXPECT_S:.0f} s")
    finally:
        drop_all(streams)


async def stop_string_aborts_engine(m: FrontendManager) -> None:
    """FE-ABORT-10."""
    fe = await m.shared()
    # Engines echo the prompt, then hold: the stop string appears in the output
    # text whatever the tokenizer, and the request is still running when matched.
    program(fe, EngineScript(tokens="echo", hold_after="prompt"))
    marker = "HALT" + uuid.uuid4().hex[:6].upper()
    stream = await fe.driver.stream_completion(f"ecp stop string {marker} and more words", HELD_MAX_TOKENS,
                                               stop=[marker])
    try:
        expect(stream.status_code == 200, f"the stop-string request failed with HTTP {stream.status_code}")
        end = await stream.read_to_end(EXPECT_S)
        expect(not end.timed_out, "the stream never ended although its stop string was produced")
        expect("stop" in end.finish_reasons, f"the stream ended with {end.finish_reasons}, not 'stop'")
        owners = [(req.request_id, e) for e in fe.engines for _, req in e.recorder.adds(include_notices=False)]
        expect(len(owners) == 1, f"one request produced {len(owners)} ADDs")
        rid, engine = owners[0]
        try:
            await fe.until(lambda: rid in engine.generation.aborted_ids or rid in engine.generation.finished_ids,
                           EXPECT_S, "the ABORT of the stop-string request")
        except CaseTimeout:
            raise CaseFailure(f"the frontend matched the stop string but never sent ABORT for {rid!r}; "
                            f"the engine keeps running it") from None
        expect(rid in engine.generation.aborted_ids, f"{rid!r} was never aborted")
        t_last = max(rec.t for rec in engine.recorder.records if rec.direction == "out" and rec.channel == "output")
        t_abort = next(rec.t for rec, ids in engine.recorder.aborts() if rid in ids)
        expect(t_abort - t_last <= PROMPT_ABORT_S,
               f"the stop-string ABORT came {t_abort - t_last:.2f} s after the engine's last output")
    finally:
        stream.drop()

#: X-Request-Id values a client may send (long, with separators and spaces); the frontend's internal
#: ids built from them travel in ADD and must come back verbatim in ABORT (``ECP-FRAME-10``)
ODD_REQUEST_IDS = ("ecp-" + "x" * 200, "ecp-a/b:c d;e", "0123456789")


async def abort_only_to_owner(m: FrontendManager) -> None:
    """FE-ABORT-11: streams pinned to each engine are dropped; each engine hears only of its own ids."""
    fe = await m.shared()
    fe.require_engines(2)
    program(fe, held_script())
    streams: list[SseStream] = []
    try:
        for engine in fe.engines:
            streams += await open_held(fe, 2, headers={"X-data-parallel-rank": str(engine.rank)})
        owned = {e.rank: set(e.generation.active) for e in fe.engines}
        drop_all(streams)
        await fe.until(lambda: all(owned[e.rank] <= e.generation.aborted_ids for e in fe.engines), EXPECT_S,
                       "the ABORTs of the dropped streams at their engines")
        await fe.quiet()   # an ABORT also sent elsewhere lands now
        for engine in fe.engines:
            added = set(engine.recorder.add_ids())
            foreign = sorted({rid for _, ids in engine.recorder.aborts() for rid in ids} - added)
            expect(not foreign, f"engine {engine.rank} received ABORT for {foreign[:3]} ({len(foreign)} id(s)), "
                                f"which the frontend had sent to another engine: an ABORT goes only to the "
                                f"engine that owns its ids (owners: { {r: sorted(i)[:2] for r, i in owned.items()} })")
    finally:
        drop_all(streams)


async def abort_carries_add_ids(m: FrontendManager) -> None:
    """FE-ABORT-12."""
    fe = await m.shared()
    program(fe, held_script())
    tag = uuid.uuid4().hex[:8]
    streams: list[SseStream] = []
    try:
        for rid in ODD_REQUEST_IDS:
            streams += await open_held(fe, 1, headers={"X-Request-Id": f"{rid}-{tag}"})
        added = {e.rank: set(e.generation.active) for e in fe.engines}
        drop_all(streams)

        def others() -> dict[int, list[str]]:
            """Per engine, the ids its ABORTs named that no ADD to it used."""
            return {e.rank: sorted(set(e.recorder.aborted_ids()) - added[e.rank]) for e in fe.engines
                    if set(e.recorder.aborted_ids()) - added[e.rank]}

        try:
            await fe.until(lambda: others() or all(added[e.rank] <= e.generation.aborted_ids for e in fe.engines),
                           EXPECT_S, "ABORTs naming the ids the ADDs used")
        except CaseTimeout:
            pass   # judged below with what arrived
        wrong, missing = others(), {e.rank: sorted(added[e.rank] - e.generation.aborted_ids) for e in fe.engines
                                    if added[e.rank] - e.generation.aborted_ids}
        expect(not wrong and not missing,
               f"dropped streams with X-Request-Id {[r[:24] for r in ODD_REQUEST_IDS]}: the ADDs used the ids "
               f"{ {r: sorted(i) for r, i in added.items() if i} }; the ABORTs named ids no ADD used "
               f"{wrong} and left {missing} unnamed")
    finally:
        drop_all(streams)


@case("FE-ABORT-1")
def test_burst_3_exact_ids(frontends):
    frontends.run(lambda m: burst_exact_ids(m, 3))


@case("FE-ABORT-4")
def test_burst_3_coalesced(frontends):
    frontends.run(lambda m: burst_coalesced(m, 3))


@case("FE-ABORT-2")
def test_burst_64_exact_ids(frontends):
    frontends.run(lambda m: burst_exact_ids(m, 64))


@case("FE-ABORT-5")
def test_burst_64_coalesced(frontends):
    frontends.run(lambda m: burst_coalesced(m, 64))


@case("FE-ABORT-3")
def test_burst_2000_exact_ids(frontends):
    frontends.run(lambda m: burst_exact_ids(m, 2000))


@case("FE-ABORT-6")
def test_burst_2000_coalesced(frontends):
    frontends.run(lambda m: burst_coalesced(m, 2000))


@case("FE-ABORT-7")
def test_single_drop_aborted_promptly(frontends):
    frontends.run(single_drop_aborted_promptly)


@case("FE-ABORT-8")
def test_explicit_abort_by_id(frontends):
    frontends.run(explicit_abort_by_id)


@case("FE-ABORT-9")
def test_explicit_abort_all(frontends):
    frontends.run(explicit_abort_all)


@case("FE-ABORT-10")
def test_stop_string_aborts_engine(frontends):
    frontends.run(stop_string_aborts_engine)


@case("FE-ABORT-11")
def test_abort_only_to_owner(frontends):
    frontends.run(abort_only_to_owner)


@case("FE-ABORT-12")
def test_abort_carries_add_ids(frontends):
    frontends.run(abort_carries_add_ids)
