"""Fuzz the reference engine's sockets with malformed frames and count what survives.

Targets:

``input``
    One ``ecp engine`` process (``python -m ecp.reference.engine``, started by
    the reference launcher) completes the handshake with the harness frontend;
    then the fuzzer sends malformed input messages (:mod:`fuzz_corpus`) and,
    every ``--good-every`` messages, one well-formed ADD. Because an engine
    reads its input socket in order, a good ADD's terminal output proves every
    message sent before it was answered or dropped: a good ADD that does not
    end within ``--bound`` seconds is a hang. The engine's RSS is sampled
    throughout. Pass: crashes 0 (the process is alive and never sent
    ENGINE_CORE_DEAD), hangs 0, every good request ended exactly once.

``handshake``
    Engine cores (threads of this process, the same ``EngineServer`` that
    ``ecp engine`` runs) each send HELLO and get one malformed INIT. Pass: each
    refuses it with a typed startup error naming a clause (``bad INIT: [ECP-…]``)
    and returns exit code 1 within ``--bound`` seconds; no other exception.

Run ``python -m campaigns.fuzz_engine --target input --frames 100000`` (see
``--help``); it prints one JSON object of figures and exits 1 if a criterion
failed. ``tests/reliability`` runs a seeded 2,000-frame variant of each target.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any


import zmq  # noqa: E402

from campaigns.fuzz_corpus import Mutator, is_valid  # noqa: E402
from benchmarks.procstat import rss_kib  # noqa: E402

from ecp.conformance.engine.harness_frontend import Addresses, HarnessFrontend  # noqa: E402
from ecp.conformance.outcomes import PeerCrashed  # noqa: E402
from ecp.conformance.transcript import Transcript  # noqa: E402
from ecp.reference.engine import launch  # noqa: E402
from ecp.reference.engine.config import config_from_options  # noqa: E402
from ecp.reference.engine.server import EngineServer  # noqa: E402
from ecp.spec import (  # noqa: E402
    ENGINE_DEAD, EngineCoreRequest, ProtocolError, RequestOutputKind, SamplingParams, decode_outputs,
    encode_add,
)

ENGINE_OPTIONS = dict(max_model_len=512, num_gpu_blocks=512, handshake_timeout_s=20.0)


def good_request(rid: str) -> EngineCoreRequest:
    return EngineCoreRequest(
        request_id=rid, prompt_token_ids=[1, 2, 3, 4], mm_features=None,
        sampling_params=SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True,
                                       output_kind=RequestOutputKind.DELTA),
        pooling_params=None, arrival_time=time.time(), lora_request=None, cache_salt=None,
        data_parallel_rank=None)


class Tally:
    """Terminal outputs per well-formed request id, and every other output seen."""

    def __init__(self) -> None:
        self.sent_at: dict[str, float] = {}
        self.terminals: collections.Counter[str] = collections.Counter()
        self.latency_max = 0.0
        self.open: set[str] = set()
        self.other_terminals = 0  # ERROR outputs answering a garbage ADD whose id was readable
        self.utility_replies = 0
        self.engine_dead = False
        self.undecodable = 0

    def on_frames(self, frames: list[bytes]) -> None:
        try:
            msg = decode_outputs(frames)
        except ProtocolError:
            self.undecodable += 1
            return
        if msg is ENGINE_DEAD:
            self.engine_dead = True
            return
        now = time.monotonic()
        if msg.utility_output is not None:
            self.utility_replies += 1
        for out in msg.outputs:
            if out.finish_reason is None:
                continue
            if out.request_id in self.sent_at:
                self.terminals[out.request_id] += 1
                self.open.discard(out.request_id)
                self.latency_max = max(self.latency_max, now - self.sent_at[out.request_id])
            else:
                self.other_terminals += 1

    def sent(self, rid: str) -> None:
        self.sent_at[rid] = time.monotonic()
        self.open.add(rid)

    def open_ids(self) -> list[str]:
        return sorted(self.open, key=self.sent_at.__getitem__)


def _drain(sock: zmq.Socket, tally: Tally, timeout_ms: int) -> None:
    if sock.poll(timeout_ms):
        for _ in range(10_000):
            try:
                tally.on_frames(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break


def fuzz_input(frames: int, seed: int, *, good_every: int = 20, bound_s: float = 5.0, window: int = 8,
               sample_every: int = 10_000, log_path: str | None = None, transport: str = "ipc",
               **engine_options: Any) -> dict[str, Any]:
    """The ``input`` target (module doc); returns the figures. ``engine_options`` are
    :class:`~ecp.reference.engine.config.EngineConfig` fields for the engine under test."""
    mut = Mutator("input", seed)
    tally = Tally()
    strategies: collections.Counter[str] = collections.Counter()
    skipped_valid = 0
    with tempfile.TemporaryDirectory(prefix="ecp-fuzz-") as tmp:
        ctx = zmq.Context()
        addr = (lambda name: f"ipc://{tmp}/{name}") if transport == "ipc" else (lambda name: "tcp://127.0.0.1:*")
        fe = HarnessFrontend(ctx, Addresses(addr("hs"), [addr("in0")], [addr("out0")], None),
                             engine_count=1, start_index=0, transcript=Transcript(max_entries=0))
        err = open(log_path or os.devnull, "w")
        handle = launch(fe.addresses.handshake, 1, 0, mode="process", stderr=err,
                        **{**ENGINE_OPTIONS, **engine_options})
        pid = handle._procs[0].pid
        out = fe.outputs[0]
        hangs: list[str] = []
        samples: list[tuple[int, int]] = []
        started = time.monotonic()
        try:
            fe.run_handshake(30.0)
            rss_start = rss_kib(pid)
            samples.append((0, rss_start))
            sent = 0
            goods = 0
            unreachable = False
            while sent < frames:
                if sent % good_every == good_every - 1:
                    rid = f"good-{seed}-{goods}"
                    goods += 1
                    tally.sent(rid)
                    try:
                        fe.send_raw(encode_add(good_request(rid)))
                    except PeerCrashed:  # the engine's input connection is gone
                        unreachable = True
                        break
                else:
                    fz = mut.next()
                    if is_valid("input", fz.frames) and fz.strategy != "unknown-utility":
                        skipped_valid += 1
                        continue
                    strategies[fz.strategy] += 1
                    try:
                        fe.send_raw(fz.frames)
                    except PeerCrashed:
                        unreachable = True
                        break
                sent += 1
                if sent % sample_every == 0:
                    samples.append((sent, rss_kib(pid)))
                # keep at most `window` good requests in flight, so latency measures handling, not queueing
                _drain(out, tally, 0)
                while window and len(tally.open) > window:
                    oldest = tally.open_ids()[0]
                    if time.monotonic() - tally.sent_at[oldest] > bound_s:
                        hangs.append(oldest)
                        tally.open.discard(oldest)  # counted as a hang; stop waiting for it
                        continue
                    if handle._procs[0].poll() is not None or tally.engine_dead:
                        break
                    _drain(out, tally, 50)
                if handle._procs[0].poll() is not None or tally.engine_dead:
                    break
            end = time.monotonic() + bound_s
            if not window:  # everything was sent at once: allow the backlog its time
                end += bound_s * sent / 1000
            while tally.open and time.monotonic() < end and handle._procs[0].poll() is None:
                _drain(out, tally, 50)
            hangs.extend(tally.open_ids())
            samples.append((sent, rss_kib(pid)))
            alive = handle._procs[0].poll() is None and not unreachable
        finally:
            codes = handle.stop(timeout=10)
            fe.close()
            ctx.destroy(linger=0)
            err.close()
        elapsed = time.monotonic() - started
    lost = [r for r in tally.sent_at if tally.terminals[r] == 0 and r not in set(hangs)]
    dups = [r for r, n in tally.terminals.items() if n > 1]
    rss = [kib for _, kib in samples]
    result = {
        "target": "engine-input", "transport": transport, "window": window, "seed": seed, "frames_sent": sent, "garbage_frames": sum(strategies.values()),
        "good_requests": len(tally.sent_at), "good_ended_once": sum(1 for n in tally.terminals.values() if n == 1),
        "lost": len(lost) + len(hangs), "duplicated": len(dups), "crashes": 0 if alive and not tally.engine_dead else 1,
        "hangs": len(hangs), "hang_bound_s": bound_s, "max_good_latency_s": round(tally.latency_max, 3),
        "errors_for_garbage_adds": tally.other_terminals, "utility_replies": tally.utility_replies,
        "skipped_still_valid": skipped_valid, "rss_start_mib": round(rss[0] / 1024, 1),
        "rss_end_mib": round(rss[-1] / 1024, 1), "rss_peak_mib": round(max(rss) / 1024, 1),
        "rss_growth_mib": round((rss[-1] - rss[0]) / 1024, 1),
        "rss_samples_mib": [(n, round(k / 1024, 1)) for n, k in samples],
        "exit_code": codes[0] if codes else None, "seconds": round(elapsed, 1),
        "frames_per_s": round(sent / elapsed), "strategies": dict(strategies),
    }
    return result


class _StartupLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def fuzz_handshake(frames: int, seed: int, *, bound_s: float = 5.0) -> dict[str, Any]:
    """The ``handshake`` target (module doc): one engine core per malformed INIT."""
    mut = Mutator("init", seed)
    config = config_from_options(**ENGINE_OPTIONS)
    logger = logging.getLogger("ecp.engine")
    catcher = _StartupLog()
    logger.addHandler(catcher)
    logger.propagate, old_propagate = False, logger.propagate
    uncaught: list[str] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda a: uncaught.append(f"{a.exc_type.__name__}: {a.exc_value}")
    strategies: collections.Counter[str] = collections.Counter()
    skipped_valid = hangs = untyped = wrong_exit = 0
    examples: list[str] = []
    started = time.monotonic()
    rss_start = rss_kib()
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="ecp-fuzz-") as tmp:
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        # every engine core has rank 0's identity: let a new connection take it over from the last one
        router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        router.bind(f"ipc://{tmp}/hs")
        sent = 0
        try:
            while sent < frames:
                fz = mut.next()
                if is_valid("init", fz.frames):
                    skipped_valid += 1
                    continue
                strategies[fz.strategy] += 1
                sent += 1
                server = EngineServer(config, rank=0, handshake_address=f"ipc://{tmp}/hs")
                t = threading.Thread(target=server.run, daemon=True)
                before = len(catcher.messages)
                t.start()
                if not router.poll(int(bound_s * 1000)):
                    hangs += 1
                    examples.append("hang: no HELLO")
                    server.stop_event.set()
                    t.join(bound_s)
                    continue
                identity, _hello = router.recv_multipart()
                router.send_multipart([identity, *fz.frames])
                t.join(bound_s)
                if t.is_alive():
                    hangs += 1
                    if len(examples) < 5:
                        examples.append(f"hang: {fz.strategy}: {[f[:40] for f in fz.frames]!r}")
                    server.stop_event.set()
                    t.join(bound_s)
                    continue
                if server.exit_code != 1:
                    wrong_exit += 1
                msgs = catcher.messages[before:]
                if not any("bad INIT: [ECP-" in m for m in msgs):
                    untyped += 1
                    if len(examples) < 5:
                        examples.append(f"{fz.strategy}: {fz.frames!r:.200} -> {msgs}")
                del catcher.messages[:]
        finally:
            router.close(0)
            ctx.term()
            logger.removeHandler(catcher)
            logger.propagate = old_propagate
            threading.excepthook = old_hook
    elapsed = time.monotonic() - started
    rss_end = rss_kib()
    return {
        "target": "engine-handshake", "seed": seed, "frames_sent": sent, "skipped_still_valid": skipped_valid,
        "crashes": len(uncaught) + untyped, "untyped_errors": untyped, "uncaught": uncaught[:5],
        "examples": examples, "wrong_exit_code": wrong_exit, "hangs": hangs, "hang_bound_s": bound_s,
        "lost": 0, "duplicated": 0, "rss_start_mib": round(rss_start / 1024, 1),
        "rss_end_mib": round(rss_end / 1024, 1), "rss_growth_mib": round((rss_end - rss_start) / 1024, 1),
        "seconds": round(elapsed, 1),
        "frames_per_s": round(sent / elapsed), "strategies": dict(strategies),
    }


def passed(result: dict[str, Any], rss_bound_mib: float) -> bool:
    """The campaign's pass criteria: no crash, no hang, nothing lost or duplicated, RSS growth bounded."""
    growth = result["rss_growth_mib"]
    return (result["crashes"] == 0 and result["hangs"] == 0 and result["lost"] == 0
            and result["duplicated"] == 0 and growth <= rss_bound_mib)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--target", choices=("input", "handshake"), default="input")
    p.add_argument("--frames", type=int, default=100_000, help="messages to send (default 100000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--good-every", type=int, default=20, help="one well-formed ADD every N messages")
    p.add_argument("--bound", type=float, default=5.0, help="seconds within which each message is handled")
    p.add_argument("--rss-bound-mib", type=float, default=16.0, help="largest RSS growth that passes")
    p.add_argument("--window", type=int, default=8,
                   help="good requests in flight before the fuzzer waits (0: send everything at once)")
    p.add_argument("--transport", choices=("ipc", "tcp"), default="ipc")
    p.add_argument("--engine-log", help="write the engine's stderr here (default: discarded)")
    args = p.parse_args(argv)
    if args.target == "input":
        result = fuzz_input(args.frames, args.seed, good_every=args.good_every, bound_s=args.bound,
                            window=args.window, transport=args.transport, log_path=args.engine_log)
    else:
        result = fuzz_handshake(args.frames, args.seed, bound_s=args.bound)
    result["passed"] = passed(result, args.rss_bound_mib)
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
