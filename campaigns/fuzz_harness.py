"""Fuzz the conformance harness's own sockets: a peer under test is exactly such an adversary.

Targets:

``engine-role``
    The harness frontend that ``ecp conformance engine`` runs
    (:class:`~ecp.conformance.engine.harness_frontend.HarnessFrontend`). A fake engine
    connects a PUSH to its output socket and sends malformed output messages,
    one at a time, interleaved every ``--good-every`` messages with a
    well-formed terminal output for a fresh request id. Every malformed message
    must be reported as a typed ``CaseFailure`` naming a clause (a case FAIL, with
    evidence), never as another exception (a harness ERROR); every well-formed
    terminal output must be indexed exactly once. Every 10th malformed message
    goes to the handshake socket instead (as HELLO or READY): it must be
    recorded as a HELLO/READY error naming a clause, without an exception.

``frontend-role``
    The scripted engine that ``ecp conformance frontend`` runs
    (:class:`~ecp.conformance.frontend.scripted_engines.ScriptedEngine`). The fuzzer plays
    the frontend under test: it owns the handshake, then sends malformed input
    messages interleaved with well-formed ADDs. Every malformed message must be
    recorded as a decode error, the engine's tasks must keep running, and every
    good ADD must get exactly one terminal output within ``--bound`` seconds.

Run ``python -m campaigns.fuzz_harness --target engine-role --frames 100000``;
it prints one JSON object and exits 1 if a criterion failed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from typing import Any


import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

from campaigns.fuzz_corpus import Mutator, is_valid  # noqa: E402
from benchmarks.procstat import py_blocks, rss_kib  # noqa: E402

from ecp.conformance.engine.harness_frontend import Addresses, HarnessFrontend  # noqa: E402
from ecp.conformance.frontend.scripted_engines import ScriptedEngine  # noqa: E402
from ecp.conformance.frontend.recorder import Recorder  # noqa: E402
from ecp.conformance.outcomes import CaseFailure  # noqa: E402
from ecp.conformance.transcript import Transcript  # noqa: E402
from ecp.spec.peer import FrontendPeer  # noqa: E402
from ecp.spec.peer.zmq_io import AsyncFrontendSockets  # noqa: E402
from ecp.spec import (  # noqa: E402
    EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, EngineHandshakeMetadata, EngineZmqAddresses,
    FinishReason, Hello, SamplingParams, decode_outputs, encode_add, encode_handshake, encode_outputs, engine_identity,
)


def _figures(target: str, seed: int, tally: collections.Counter, examples: list[str], rss: list[int],
             blocks: int, started: float, bound_s: float) -> dict[str, Any]:
    elapsed = time.monotonic() - started
    return {
        "target": target, "seed": seed, "frames_sent": tally["frames_sent"], "good": tally["good"],
        "good_ended_once": tally["good_ended_once"], "lost": tally["lost"], "duplicated": tally["duplicated"],
        "crashes": tally["crashes"], "unflagged": tally["unflagged"], "hangs": tally["hangs"],
        "hang_bound_s": bound_s, "skipped_still_valid": tally["skipped_still_valid"], "examples": examples,
        "rss_start_mib": round(rss[0] / 1024, 1), "rss_end_mib": round(rss[-1] / 1024, 1),
        "rss_peak_mib": round(max(rss) / 1024, 1), "rss_growth_mib": round((rss[-1] - rss[0]) / 1024, 1),
        "py_blocks_retained": py_blocks() - blocks,
        "seconds": round(elapsed, 1), "frames_per_s": round(tally["frames_sent"] / max(elapsed, 1e-9)),
        "strategies": {k.split(":", 1)[1]: v for k, v in tally.items() if k.startswith("strategy:")},
    }


def _note(examples: list[str], text: str) -> None:
    if len(examples) < 5:
        examples.append(text)


# ====================================================================== engine role
def fuzz_engine_role(frames: int, seed: int, *, good_every: int = 20, bound_s: float = 5.0) -> dict[str, Any]:
    out_mut, hs_mut = Mutator("output", seed), Mutator("handshake", seed + 1)
    tally: collections.Counter = collections.Counter()
    examples: list[str] = []
    rss = [rss_kib()]
    blocks = py_blocks()
    started = time.monotonic()
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="ecp-fuzz-") as tmp:
        h = HarnessFrontend(ctx, Addresses(f"ipc://{tmp}/hs", [f"ipc://{tmp}/in0"], [f"ipc://{tmp}/out0"], None),
                            engine_count=1, start_index=0, transcript=Transcript(max_entries=0))
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(h.addresses.outputs[0])
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.IDENTITY, engine_identity(0))
        dealer.connect(h.addresses.handshake)
        goods = 0
        try:
            while tally["frames_sent"] < frames:
                n = tally["frames_sent"]
                if n % good_every == good_every - 1:
                    rid = f"good-{goods}"
                    goods += 1
                    tally["good"] += 1
                    push.send_multipart(encode_outputs(EngineCoreOutputs(
                        engine_index=0, outputs=[EngineCoreOutput(rid, [7], finish_reason=FinishReason.LENGTH)],
                        finished_requests={rid})))
                    tally["frames_sent"] += 1
                    end = time.monotonic() + bound_s
                    while not h.terminals(rid) and time.monotonic() < end:
                        try:
                            h.pump(min(end, time.monotonic() + 0.05))
                        except CaseFailure as exc:
                            _note(examples, f"good output flagged: {exc}")
                            tally["crashes"] += 1
                    seen = len(h.terminals(rid))
                    tally["good_ended_once" if seen == 1 else "lost" if seen == 0 else "duplicated"] += 1
                    if seen == 0:
                        tally["hangs"] += 1
                    continue
                on_handshake = n % 10 == 0
                mut = hs_mut if on_handshake else out_mut
                fz = mut.next()
                if is_valid(mut.direction, fz.frames):
                    tally["skipped_still_valid"] += 1
                    continue
                tally[f"strategy:{fz.strategy}"] += 1
                tally["frames_sent"] += 1
                if on_handshake:
                    _engine_role_handshake(h, dealer, fz, bound_s, tally, examples)
                    continue
                push.send_multipart(fz.frames)
                end = time.monotonic() + bound_s
                flagged = False
                while not flagged and time.monotonic() < end:
                    try:
                        h.pump(min(end, time.monotonic() + 0.05))
                    except CaseFailure as exc:
                        flagged = bool(exc.clause)
                        if not flagged:
                            _note(examples, f"violation without a clause: {exc}")
                            tally["unflagged"] += 1
                            break
                    except Exception as exc:  # noqa: BLE001 - a harness bug: what the campaign looks for
                        tally["crashes"] += 1
                        _note(examples, f"{fz.strategy}: {type(exc).__name__}: {exc} <- {fz.frames!r:.160}")
                        break
                else:
                    if not flagged:
                        tally["unflagged"] += 1
                        _note(examples, f"not reported: {fz.strategy}: {fz.frames!r:.160}")
                if n % 10_000 == 0:
                    rss.append(rss_kib())
        finally:
            push.close(0)
            dealer.close(0)
            h.close()
            ctx.destroy(linger=0)
    del h  # its raw outputs are a case's evidence, kept while it lives; what outlives it is a leak
    rss.append(rss_kib())
    return _figures("harness-engine-role", seed, tally, examples, rss, blocks, started, bound_s)


def _engine_role_handshake(h: HarnessFrontend, dealer: zmq.Socket, fz: Any, bound_s: float,
                           tally: collections.Counter, examples: list[str]) -> None:
    """One malformed HELLO (or, after a good HELLO, a malformed READY) through the handshake handler.

    ``run_handshake`` waits for a whole handshake (with its grace periods) per call; to reach
    100,000 messages this drives the same receive and handler steps it runs, one message at a
    time, with the per-engine records reset in between (one engine identity is reused)."""
    h.evidence.reset()
    h._make_peer()  # a fresh handshake for the reused identity
    as_ready = tally["frames_sent"] % 20 == 1
    messages = [[encode_handshake_hello()], fz.frames] if as_ready else [fz.frames]
    for frames in messages:
        dealer.send_multipart(frames)
        end = time.monotonic() + bound_s
        got = []
        while not got and time.monotonic() < end:
            got = [f for s, f in h.poll_once(min(end, time.monotonic() + 0.05)) if s is h.handshake]
        if not got:
            tally["hangs"] += 1
            return
        try:
            for frames_in in got:  # the hook the handshake loop calls, and the INIT it answers
                for send in h.evidence.receive(h.peer, "handshake", frames_in):
                    h.handshake.send_multipart(send.frames)
        except Exception as exc:  # noqa: BLE001 - a harness bug
            tally["crashes"] += 1
            _note(examples, f"handshake {fz.strategy}: {type(exc).__name__}: {exc}")
            return
        while dealer.poll(0):  # INITs answering a HELLO: nothing to check here
            dealer.recv_multipart()
    rec = next(iter(h.evidence.records.values()), None)
    error = None if rec is None else (rec.ready_error if as_ready else rec.hello_error)
    anomalies = [] if rec is None else rec.anomalies
    if not (error and "ECP-" in error) and not anomalies:
        tally["unflagged"] += 1
        _note(examples, f"handshake not reported: {fz.strategy}: {fz.frames!r:.160} -> {error!r}")


def encode_handshake_hello() -> bytes:
    return encode_handshake(Hello(local=True, headless=False))


# ====================================================================== frontend role
def _good_add(rid: str) -> list[bytes]:
    return encode_add(EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=2, temperature=0.0),
                                        None, time.time(), None, None, None))


def fuzz_frontend_role(frames: int, seed: int, *, good_every: int = 20, bound_s: float = 5.0) -> dict[str, Any]:
    mut = Mutator("input", seed)
    tally: collections.Counter = collections.Counter()
    examples: list[str] = []
    rss = [rss_kib()]
    blocks = py_blocks()
    started = time.monotonic()

    async def body() -> None:
        ctx = zmq.asyncio.Context()
        with tempfile.TemporaryDirectory(prefix="ecp-fuzz-") as tmp:
            router = ctx.socket(zmq.ROUTER)
            inp = ctx.socket(zmq.ROUTER)
            out = ctx.socket(zmq.PULL)
            for s, name in ((router, "hs"), (inp, "in0"), (out, "out0")):
                s.setsockopt(zmq.LINGER, 0)
                s.bind(f"ipc://{tmp}/{name}")
            recorder = Recorder()
            engine = ScriptedEngine(ctx, 0, 1, f"ipc://{tmp}/hs", recorder=recorder)
            engine.start(bound_s)
            try:
                peer = FrontendPeer([0], EngineHandshakeMetadata(
                    addresses=EngineZmqAddresses(inputs=[f"ipc://{tmp}/in0"], outputs=[f"ipc://{tmp}/out0"]),
                    parallel_config={}))
                await AsyncFrontendSockets(peer, {"handshake": router, "input[0]": inp}).handshake(bound_s)
                identity = engine_identity(0)
                await engine.wait_registered(bound_s)
                terminals: collections.Counter[str] = collections.Counter()
                goods = 0

                def count_records() -> None:
                    for r in recorder.records:
                        if r.direction == "in" and r.channel == "input" and r.error is None:
                            tally["inputs_recorded"] += 1
                    # every undecodable input is counted; past the recorder's evidence cap it is not kept
                    tally["inputs_recorded"] += recorder.undecodable
                    tally["decode_errors_recorded"] += recorder.undecodable

                loop = asyncio.get_running_loop()

                async def drain(until: float, rid: str | None) -> None:
                    while loop.time() < until and not (rid is None or terminals[rid]):
                        if not await out.poll(max(1, int((until - loop.time()) * 1000))):
                            continue
                        msg = decode_outputs(await out.recv_multipart())
                        for o in getattr(msg, "outputs", ()):
                            if o.finish_reason is not None:
                                terminals[o.request_id] += 1
                        if rid is None:
                            return

                while tally["frames_sent"] < frames:
                    n = tally["frames_sent"]
                    if n % good_every == good_every - 1:
                        rid = f"good-{goods}"
                        goods += 1
                        tally["good"] += 1
                        tally["frames_sent"] += 1
                        await inp.send_multipart([identity, *_good_add(rid)])
                        await drain(loop.time() + bound_s, rid)
                        if not terminals[rid]:
                            tally["lost"] += 1
                            tally["hangs"] += 1
                        if engine.failure is not None or any(t.done() for t in engine._tasks):
                            tally["crashes"] += 1
                            _note(examples, f"engine task ended: {engine.failure!r}")
                            return
                        if len(recorder.records) > 1_000:
                            count_records()
                            recorder.clear()  # keep the evidence log of a long campaign bounded
                        continue
                    fz = mut.next()
                    if is_valid("input", fz.frames) and fz.strategy != "unknown-utility":
                        tally["skipped_still_valid"] += 1
                        continue
                    tally[f"strategy:{fz.strategy}"] += 1
                    tally["frames_sent"] += 1
                    tally["garbage_invalid"] += fz.strategy != "unknown-utility"
                    await inp.send_multipart([identity, *fz.frames])
                    if n % 10_000 == 0:
                        rss.append(rss_kib())
                await drain(loop.time() + 0.2, None)
                tally["good_ended_once"] = sum(1 for r, c in terminals.items() if r.startswith("good-") and c == 1)
                tally["duplicated"] = sum(1 for r, c in terminals.items() if r.startswith("good-") and c > 1)
                count_records()
                # every malformed message must be on the record as a decode error
                tally["unflagged"] = tally["garbage_invalid"] - tally["decode_errors_recorded"]
                if tally["inputs_recorded"] != tally["frames_sent"]:
                    tally["lost"] += abs(tally["frames_sent"] - tally["inputs_recorded"])
                    _note(examples, f"{tally['inputs_recorded']} inputs recorded of {tally['frames_sent']} sent")
            finally:
                await engine.stop()
                for s in (router, inp, out):
                    s.close(0)
                ctx.term()

    asyncio.run(body())
    rss.append(rss_kib())
    result = _figures("harness-frontend-role", seed, tally, examples, rss, blocks, started, bound_s)
    result["decode_errors_recorded"] = tally["decode_errors_recorded"]
    result["inputs_recorded"] = tally["inputs_recorded"]
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--target", choices=("engine-role", "frontend-role"), default="engine-role")
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--good-every", type=int, default=20)
    p.add_argument("--bound", type=float, default=5.0)
    p.add_argument("--rss-bound-mib", type=float, default=16.0)
    args = p.parse_args(argv)
    run = fuzz_engine_role if args.target == "engine-role" else fuzz_frontend_role
    r = run(args.frames, args.seed, good_every=args.good_every, bound_s=args.bound)
    r["passed"] = (r["crashes"] == 0 and r["hangs"] == 0 and r["lost"] == 0 and r["duplicated"] == 0
                   and r["unflagged"] == 0 and r["good_ended_once"] == r["good"]
                   and r["rss_growth_mib"] <= args.rss_bound_mib)
    print(json.dumps(r, indent=1))
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
