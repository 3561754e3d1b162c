"""A small scripted engine speaking raw frames through ``ecp.spec``: the harness's raw-frame peer.

It behaves correctly by default and misbehaves on purpose with ``--bug NAME``
(the names the reference engine uses where they overlap, plus more), so the
conformance suite can prove that each case catches the fault it exists for.
Tokens are a deterministic function of the prompt and position (greedy); one
step every ``--step-ms`` produces one token for every running request.

Run: ``python scripted_engine.py --handshake-address ADDR --engine-count N [--bug NAME]...``
or in-process through :func:`start` (the ``--adapter`` form).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass, field

import msgspec
import zmq

from ecp.spec import (
    EngineCoreOutput, EngineCoreRequest, EngineCoreOutputs, EngineCoreReadyResponse, FinishReason,
    Hello, ProtocolError, Ready, RequestError, SamplingParams, StartDPWave, UtilityOutput, UtilityRequest, UtilityResult,
    decode_any, recover_add_frames, decode_input, encode_engine_dead, encode_outputs, engine_identity,
)
from ecp.spec.errors import UtilityArgumentError
from ecp.spec.utility_methods import UTILITY_METHODS, failure_message, no_such_method
from ecp.spec.machine import SchedulerControl, input_socket, output_socket
from ecp.spec.peer import FORCE, TWICE, WITHHOLD, Deviation, EnginePeer, Step
from ecp.spec.peer.zmq_io import EngineSockets
from ecp.spec.profile import shipped_profile

MAX_MODEL_LEN = 256
#: how long a rank waits for INIT and the coordinator gate (the harness stops it long before)
HANDSHAKE_TIMEOUT_S = 300.0
#: the knob of a peer speaking vLLM 0.32 instead of the suite's release
OLD_RELEASE = "vllm-0.32"
#: the command template that launches this engine as a subprocess
COMMAND = [sys.executable, __file__, "--handshake-address", "{handshake_address}",
           "--engine-count", "{engine_count}", "--engine-start-index", "{engine_start_index}"]
BUGS = {
    # reference-engine knob names
    "ignore-abort-immediately", "no-terminal-output", "duplicate-output", "inconsistent-is-sleeping",
    "reset-prefix-cache-fails", "crash-on-bad-frame", "wrong-call-id",
    # raw-frame peer variants
    "bad-hello", "wrong-identity", "empty-ready", "no-ready", "double-registration", "first-input-only",
    "ignore-max-tokens", "no-stop-token", "no-min-tokens", "no-duplicate-check", "no-length-check",
    "no-param-check", "stop-instead-of-length", "eos-stop-reason", "runs-while-asleep", "wrong-engine-index", "outputs-to-client-0",
    "cumulative-tokens", "ignore-abort", "abort-unknown-errors", "abort-max-16-ids", "error-on-finished-abort",
    "abort-immediately-aborts-all", "bare-utility-result", "unknown-method-nil", "sleep-abort-silent",
    "bad-supported-tasks", "is-sleeping-inverted", "same-identity", "no-coordinator-gate",
    "wave-complete-to-client", "no-sleep-mode", "crash-on-dp-wave", "no-recover-id", "simulate-unpickle",
    "reject-bad-client-crash", "deaf-on-bad-frame",
    # a minimal engine that only ever starts its first rank: every other rank stays silent
    "one-rank-only",
    # peer behaviour the harness must report as FAIL/TIMEOUT/CRASH, never as its own ERROR
    "garbage-outputs", "silent", "crash-on-add", "close-on-add",
    # strict receivers: refuse what a tolerant one must accept
    "strict-arrays", "python-forms-only", "strict-sampling-keys",
    # SIGTERM: exit at once, leaving in-flight requests without a terminal output
    "sigterm-drops-requests",
    # a crash whose process exits a second after it closed its sockets (a slow teardown, a loaded machine)
    "slow-exit",
    # another release: ready payload, outputs and utility methods of vLLM 0.32, built from its profile
    OLD_RELEASE,
}
#: the utility methods the scripted engine answers (of the spec's table); any other is unknown to it
UTILITIES = frozenset({
    "is_sleeping", "sleep", "wake_up", "reset_prefix_cache", "pause_generation", "pause_scheduler",
    "resume_scheduler", "is_scheduler_paused", "reset_mm_cache", "reset_encoder_cache", "get_supported_tasks",
})
assert UTILITIES <= set(UTILITY_METHODS), UTILITIES - set(UTILITY_METHODS)
#: the SamplingParams keys the scripted engine knows (``strict-sampling-keys`` refuses any other)
SAMPLING_KEYS = {f.encode_name for f in msgspec.inspect.type_info(SamplingParams).fields}


def as_release(value, cls):
    """A 0.33 message (ecp.spec's) carried into another release's class: the fields both have."""
    return cls(**{name: getattr(value, name) for name in cls.__struct_fields__ if hasattr(value, name)})


@dataclass
class Running:
    rid: str
    prompt: list[int]
    client: int
    max_tokens: int
    min_tokens: int
    stop: set[int]
    ignore_eos: bool
    eos: int | None = None
    produced: list[int] = field(default_factory=list)


def token(prompt: list[int], pos: int) -> int:
    return (sum(prompt) * 31 + pos * 7) % 997 + 3


class StopReading(Exception):
    """Raised on bad input by the ``deaf-on-bad-frame`` knob: the rank closes its input sockets and
    reads nothing more, but stays up and sends no ENGINE_CORE_DEAD (what vLLM 0.33's engine core does
    when its input thread dies)."""


class Crash(Exception):
    pass


class Rank:
    def __init__(self, ctx: zmq.Context, address: str, rank: int, bugs: set[str], step_s: float,
                 stop: threading.Event, dp_size: int = 1) -> None:
        self.ctx, self.address, self.rank, self.bugs, self.step_s, self.stop = ctx, address, rank, bugs, step_s, stop
        self.dp_size = dp_size
        #: the ranks of this launch (threads of one process), for the wave agreement
        self.group: list[Rank] = [self]
        #: requests this rank admitted; rank 0 reports a wave once the group's count moved and all are idle
        self.admitted = 0
        self.reported = 0
        self.running: dict[str, Running] = {}
        self.finished: set[str] = set()
        self.sleeping = False
        self.sleeping_tags: set[str] = set()
        self.paused = False
        #: the spec's sleep/pause state, stepped on the calls this engine answered: whether a new ADD
        #: is refused (a user pause) is asked of it
        self.control = SchedulerControl()
        #: mode keep: running requests stand still until the resume
        self.frozen = False
        self.held: list = []
        self.wave = 0
        self.identity = engine_identity(0 if "same-identity" in bugs else rank)
        if "wrong-identity" in bugs:
            self.identity = rank.to_bytes(3, "little")

    def log(self, msg: str) -> None:
        print(f"[rank {self.rank}] {msg}", file=sys.stderr, flush=True)

    def crash(self, why: str, announce: bool = False) -> None:
        """Die like a broken engine: this rank's thread ends (and a subprocess exits 3)."""
        self.log(f"crashing ({why})")
        if announce:
            for s in self.outputs:
                s.send_multipart(encode_engine_dead())
        raise Crash(why)

    # ---------------------------------------------------------------- handshake
    def deviate(self, step: Step, index: int | None) -> Deviation | None:
        """The handshake bug knobs: each replaces one step of the engine skeleton."""
        bugs = self.bugs
        if step is Step.HELLO and "bad-hello" in bugs:
            return Deviation(raw=(b"\x81\xa6status\xa5HELLO",))
        if step is Step.REGISTRATION:
            if index and "first-input-only" in bugs:
                return WITHHOLD
            if "double-registration" in bugs:
                return TWICE
        if step is Step.SUBSCRIBE and "no-coordinator-gate" in bugs:
            return WITHHOLD
        if step is Step.READY:
            if "no-ready" in bugs:
                return WITHHOLD
            if {"first-input-only", "no-coordinator-gate"} & bugs:
                return FORCE  # READY too early, on purpose
        return None

    def handshake(self) -> None:
        ready = EngineCoreReadyResponse(
            max_model_len=MAX_MODEL_LEN, num_gpu_blocks=64, block_size=16, dp_stats_address=None, dtype="float32",
            vllm_version="0.33.0", world_size=1, data_parallel_size=self.dp_size, tensor_parallel_size=1,
            pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=self.rank,
            max_num_seqs=64, max_num_batched_tokens=2048, instance_id=f"scripted-{self.rank}",
            supports_lora=False, max_loras=0, enable_sleep_mode="no-sleep-mode" not in self.bugs)
        # the engine side of the protocol: the skeleton takes every step through the machine, and a bug
        # knob that breaks a rule replaces its step (the machine still follows what went out)
        payload = None if "empty-ready" in self.bugs else ready
        if OLD_RELEASE in self.bugs:  # the release's own payload, written as given
            ready_cls = shipped_profile("0.32").frame_message("ready payload")
            payload = msgspec.msgpack.encode(as_release(msgspec.structs.replace(ready, vllm_version="0.32.0"),
                                                        ready_cls))
        self.peer = EnginePeer(self.rank, hello=Hello(local=False, headless=True), ready=Ready(
                               local=False, headless=True,
                               parallel_config_hash="scripted-dp" if self.dp_size > 1 else None),
                               payload=payload, identity=self.identity,
                               deviate=self.deviate)
        self.io = EngineSockets(self.ctx, self.peer, stop=self.stop.is_set, linger_ms={"output": 1000})
        if not self.io.handshake(self.address, HANDSHAKE_TIMEOUT_S):
            raise Crash("stopped during the handshake")
        sockets = self.io.sockets
        self.inputs = [sockets[input_socket(c)] for c in range(self.peer.clients)]
        self.outputs = [sockets[output_socket(c)] for c in range(self.peer.clients)]
        # a rank that skipped the gate never talks to the coordinator
        self.coord_push = None if "no-coordinator-gate" in self.bugs else sockets.get("coordinator_output")

    # ---------------------------------------------------------------- outputs
    def emit(self, client: int, outs=(), utility=None, finished=None) -> None:
        if not 0 <= client < len(self.outputs):
            self.log(f"dropping output for client {client}: no such output socket")
            return
        if "outputs-to-client-0" in self.bugs:
            client = 0
        idx = self.rank + 100 if "wrong-engine-index" in self.bugs else self.rank
        msg = EngineCoreOutputs(engine_index=idx, outputs=list(outs), timestamp=time.monotonic(),
                                utility_output=utility, finished_requests=finished)
        frames = encode_outputs(msg)
        if OLD_RELEASE in self.bugs:
            profile = shipped_profile("0.32")
            msg.outputs = [as_release(o, profile.message("EngineCoreOutput")) for o in msg.outputs]
            frames = [msgspec.msgpack.encode(as_release(msg, profile.frame_message("outputs")))]
        if "garbage-outputs" in self.bugs:
            frames = [b"\xc1 not msgpack", b"\x00" * 3]
        if utility is not None and "bare-utility-result" in self.bugs and utility.result is not None:
            raw = decode_any(frames[0])
            raw[4][2] = utility.result.value
            frames = [msgspec.msgpack.encode(raw)]
        self.outputs[client].send_multipart(frames)

    def error(self, rid: str, client: int, code: str, message: str, retryable: bool = False,
              finished: bool = True) -> None:
        self.emit(client, [EngineCoreOutput(rid, [], finish_reason=FinishReason.ERROR,
                                            error=RequestError(code, message, retryable))],
                  finished={rid} if finished else None)

    def strict(self, frames: list[bytes]) -> str | None:
        """What a strict-receiver knob refuses in an ADD (None: nothing)."""
        raw = decode_any(frames[1])
        if "strict-arrays" in self.bugs and len(raw) != len(EngineCoreRequest.__struct_fields__):
            return f"ADD array of {len(raw)} elements"
        if "python-forms-only" in self.bugs and (b"\xca" in frames[1] or
                                                  isinstance(raw[3], dict) and isinstance(raw[3].get("temperature"), int)):
            return "float32 or int where a float64 is expected"
        if "strict-sampling-keys" in self.bugs and isinstance(raw[3], dict) and set(raw[3]) - SAMPLING_KEYS:
            return f"unknown SamplingParams keys {sorted(set(raw[3]) - SAMPLING_KEYS)}"
        return None

    # ---------------------------------------------------------------- inputs
    def on_bad(self, frames: list[bytes], exc: ProtocolError, client: int) -> None:
        self.log(f"rejected input: {exc}")
        if "deaf-on-bad-frame" in self.bugs:
            raise StopReading()
        if "crash-on-bad-frame" in self.bugs:
            self.crash("bad frame")
        if "simulate-unpickle" in self.bugs:
            # simulates a peer that unpickles: finds the marker path in the opcodes, no unpickling
            for f in frames:
                i = f.find(b"open\n(V")
                if i >= 0:
                    path = f[i + 7:f.index(b"\n", i + 7)].decode()
                    open(path, "w").close()
        # a malformed UTILITY whose call id is recoverable MAY be answered with its failure (ECP-ROB-1):
        # this engine drops it, the reference engine answers it, and the suite passes both
        recovered = recover_add_frames(frames)
        # a truncated ADD whose leading id is readable MAY be answered (ECP-ROB-2): this engine does not,
        # the reference engine does, and the suite passes both
        if recovered is not None and recovered.complete and "no-recover-id" not in self.bugs:
            cidx = client if recovered.client_index is None else recovered.client_index
            self.error(recovered.request_id, cidx, "invalid_request", str(exc))

    def on_input(self, client: int, frames: list[bytes]) -> None:
        if "silent" in self.bugs:
            return
        if frames[:1] == [b"\x00"] and "crash-on-add" in self.bugs:
            self.crash("ADD")
        if frames[:1] == [b"\x00"] and "close-on-add" in self.bugs:
            for s in self.outputs:
                s.close(0)
            raise StopReading()
        try:
            msg = decode_input(frames)
        except ProtocolError as exc:
            self.on_bad(frames, exc, client)
            return
        if isinstance(msg, EngineCoreRequest) and {"strict-arrays", "python-forms-only", "strict-sampling-keys"} & self.bugs:
            refused = self.strict(frames)
            if refused:
                self.error(msg.request_id, msg.client_index, "invalid_request", refused)
                return
        if isinstance(msg, EngineCoreRequest):
            self.on_add(msg)
        elif isinstance(msg, list):  # ABORT: the request ids
            self.on_abort(msg)
        elif isinstance(msg, UtilityRequest):
            self.on_utility(msg)
        elif isinstance(msg, StartDPWave) and "crash-on-dp-wave" in self.bugs:
            self.crash("START_DP_WAVE", announce=True)

    def on_add(self, req) -> None:
        rid, client, sp = req.request_id, req.client_index, req.sampling_params
        self.wave = max(self.wave, req.current_wave)
        if not 0 <= client < len(self.outputs) and "reject-bad-client-crash" in self.bugs:
            self.crash("client_index out of range")
        if req.abort_immediately:
            if "abort-immediately-aborts-all" in self.bugs:
                self.running.clear()
            if "ignore-abort-immediately" not in self.bugs:
                return
        if self.control.refusing:
            self.error(rid, client, "engine_paused", "Generation is paused. Please retry after it resumes.",
                       retryable=True)
            return
        if self.paused:
            self.held.append(req)
            return
        if rid in self.running and "no-duplicate-check" not in self.bugs:
            self.error(rid, client, "duplicate_request_id", f"request {rid} is already running", finished=False)
            return
        if sp is None:
            self.error(rid, client, "unsupported_task", "pooling is not supported")
            return
        problems = [] if "no-param-check" in self.bugs else sp.validation_errors()
        if problems:
            # vLLM's own code for a request that failed validation (the reference engine uses another: both conform)
            self.error(rid, client, "validation_error", "; ".join(problems))
            return
        prompt = list(req.prompt_token_ids or [])
        if len(prompt) > MAX_MODEL_LEN and "no-length-check" not in self.bugs:
            self.error(rid, client, "prompt_too_long", f"prompt of {len(prompt)} > {MAX_MODEL_LEN}")
            return
        self.running[rid] = Running(rid, prompt, client, min(sp.max_tokens or 16, MAX_MODEL_LEN),
                                    sp.min_tokens, set(sp.stop_token_ids or []), sp.ignore_eos,
                                    sp._eos_token_id)
        self.admitted += 1  # after it runs: rank 0 must never see the count moved and this rank idle

    def on_abort(self, ids: list[str]) -> None:
        if "ignore-abort" in self.bugs:
            return
        if "abort-max-16-ids" in self.bugs:
            ids = ids[:16]
        for rid in ids:
            self.held = [q for q in self.held if q.request_id != rid]  # queued while paused: dropped
            r = self.running.pop(rid, None)
            if r is not None:
                self.emit(r.client, [EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT)], finished={rid})
            elif rid in self.finished and "error-on-finished-abort" in self.bugs:
                self.error(rid, 0, "not_running", "already finished")
            elif rid not in self.finished and "abort-unknown-errors" in self.bugs:
                self.error(rid, 0, "unknown", "no such request")

    def on_utility(self, call) -> None:
        method, cid = call.method_name, call.call_id
        if "wrong-call-id" in self.bugs:
            cid = (cid + 1) % 2**64

        def ok(value=None) -> None:
            self.emit(call.client_idx, utility=UtilityOutput(cid, None, UtilityResult(None, value)))

        def fail(message: str) -> None:
            self.emit(call.client_idx, utility=UtilityOutput(cid, message, None))

        if method not in UTILITIES or (OLD_RELEASE in self.bugs and method == "pause_generation"):
            if "unknown-method-nil" in self.bugs:
                ok(None)
            else:
                fail(failure_message(method, no_such_method(method, "ScriptedEngine")))
            return
        try:  # the arguments by name, with the spec table's defaults
            args = UTILITY_METHODS[method].bind(call.args)
        except UtilityArgumentError as exc:
            fail(failure_message(method, exc.message))
            return
        if method == "is_sleeping":
            inverted = "is-sleeping-inverted" in self.bugs or (
                "inconsistent-is-sleeping" in self.bugs and self.rank % 2 == 1)
            ok(not self.sleeping if inverted else self.sleeping)
        elif method == "sleep":
            if args["mode"] == "abort":
                for rid, r in list(self.running.items()):
                    del self.running[rid]
                    self.finished.add(rid)
                    if "sleep-abort-silent" not in self.bugs:
                        self.emit(r.client, [EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT)],
                                  finished={rid})
            self.sleeping = True
            self.sleeping_tags = {"weights", "kv_cache"}  # level 1 or 2 puts both to sleep (ECP-UTIL-8.7)
            self.control.carried_out(method, call.args, None)
            ok(None)
        elif method == "wake_up":
            tags = args["tags"]
            if tags is None:
                self.sleeping_tags = set()
            else:
                self.sleeping_tags -= set(tags)
            self.sleeping = bool(self.sleeping_tags)
            self.control.carried_out(method, call.args, not self.sleeping)
            ok(not self.sleeping)
        elif method == "reset_prefix_cache":
            if "reset-prefix-cache-fails" in self.bugs:
                fail(failure_message(method, "injected fault"))
            else:
                ok(True)
        elif method in ("pause_generation", "pause_scheduler"):
            mode = (list(call.args) or ["abort"])[0]
            # modes abort and keep, the ones the cases use (wait, which replies once the running
            # requests ended, is played as abort)
            if mode != "keep":
                for rid, r in list(self.running.items()):
                    del self.running[rid]
                    self.finished.add(rid)
                    self.emit(r.client, [EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT)],
                              finished={rid})
            self.paused, self.frozen = True, mode == "keep"
            self.control.carried_out(method, call.args, None)
            ok(None)
        elif method == "resume_scheduler":
            self.paused = self.frozen = False
            self.control.carried_out(method, call.args, None)
            held, self.held = self.held, []
            for req in held:
                self.on_add(req)
            ok(None)
        elif method == "is_scheduler_paused":
            ok(self.paused)
        elif method in ("reset_mm_cache", "reset_encoder_cache"):
            ok(None)
        elif method == "get_supported_tasks":
            ok("generate" if "bad-supported-tasks" in self.bugs else ["generate"])

    # ---------------------------------------------------------------- steps
    def step(self) -> None:
        if self.frozen:
            return
        by_client: dict[int, list[EngineCoreOutput]] = {}
        for rid, r in list(self.running.items()):
            t = token(r.prompt, len(r.produced))
            r.produced.append(t)
            reason = None
            n = len(r.produced)
            limit = r.max_tokens + (1 if "ignore-max-tokens" in self.bugs else 0)
            stops = r.stop if "no-stop-token" not in self.bugs else set()
            eos = t == r.eos and not r.ignore_eos
            if (t in stops or eos) and (n >= r.min_tokens or "no-min-tokens" in self.bugs):
                reason = FinishReason.STOP
            elif n >= limit:
                reason = FinishReason.STOP if "stop-instead-of-length" in self.bugs else FinishReason.LENGTH
            toks = list(r.produced) if "cumulative-tokens" in self.bugs else [t]
            out = EngineCoreOutput(rid, toks, finish_reason=reason,
                                   stop_reason=t if reason == FinishReason.STOP and (not eos or "eos-stop-reason" in self.bugs)
                                   else None)
            if reason is not None:
                del self.running[rid]
                self.finished.add(rid)
                if "no-terminal-output" in self.bugs:
                    out = EngineCoreOutput(rid, toks)
            by_client.setdefault(r.client, []).append(out)
            if reason is not None and "duplicate-output" in self.bugs:
                by_client[r.client].append(EngineCoreOutput(rid, [], finish_reason=reason))
        for client, outs in by_client.items():
            self.emit(client, outs)

    def maybe_complete_wave(self) -> None:
        """Global rank 0 reports the wave once every rank of the launch is idle (ECP-DP-5): the ranks,
        threads of one process, agree through shared memory, as vLLM's agree by an all-reduce."""
        if self.rank != 0 or self.coord_push is None:
            return
        admitted = sum(r.admitted for r in self.group)
        if admitted != self.reported and not any(r.running for r in self.group):
            self.reported = admitted
            done = EngineCoreOutputs(engine_index=self.rank, wave_complete=self.wave)
            if "wave-complete-to-client" in self.bugs:
                self.outputs[0].send_multipart(encode_outputs(done))
            else:
                self.coord_push.send_multipart(encode_outputs(done))

    def run(self) -> None:
        try:
            self._run()
        except Crash:
            self.crashed = True
        except zmq.ZMQError:
            if not self.stop.is_set():  # sockets closed under us only at shutdown
                raise

    def _run(self) -> None:
        self.handshake()
        poller = zmq.Poller()
        for s in self.inputs:
            poller.register(s, zmq.POLLIN)
        next_step = time.monotonic()
        while not self.stop.is_set():
            timeout = max(0.0, next_step - time.monotonic()) if self.running else 0.05
            for sock, _ in poller.poll(int(timeout * 1000)):
                while not sock.closed:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    try:
                        self.on_input(self.inputs.index(sock), frames)
                    except StopReading:
                        for s in self.inputs:
                            poller.unregister(s)
                            s.close(0)
                        break
            # asleep, nothing is scheduled: ADDs queue until the wake_up (vLLM's choice, ECP-UTIL-8)
            asleep = self.sleeping and "runs-while-asleep" not in self.bugs
            if self.running and not asleep and time.monotonic() >= next_step:
                self.step()
                next_step = time.monotonic() + self.step_s
            self.maybe_complete_wave()
        if "sigterm-drops-requests" not in self.bugs:
            # a graceful stop (ECP-ROB-5): every in-flight request ends with ABORT before the sockets close
            for rid, r in list(self.running.items()):
                del self.running[rid]
                if not self.outputs[r.client].closed:
                    self.emit(r.client, [EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT)],
                              finished={rid})
        self.io.close(0)


class ScriptedEngines:
    """N ranks on threads; ``.stop()`` ends them (the ``--adapter`` contract)."""

    def __init__(self, address: str, count: int, start_index: int = 0, bugs=(), step_ms: float = 1.0) -> None:
        unknown = set(bugs) - BUGS
        if unknown:
            raise ValueError(f"unknown bug knob(s) {sorted(unknown)}")
        self.ctx = zmq.Context()
        self._stop = threading.Event()
        self.ranks = [Rank(self.ctx, address, start_index + k, set(bugs), step_ms / 1000, self._stop, count)
                      for k in range(count)]
        for rank in self.ranks:
            rank.group = self.ranks
        self.threads = [threading.Thread(target=rank.run if k == 0 or "one-rank-only" not in bugs else self._stop.wait,
                                         daemon=True) for k, rank in enumerate(self.ranks)]
        for t in self.threads:
            t.start()

    def alive(self) -> bool:
        return all(t.is_alive() for t in self.threads)

    def stop(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(2)
        self.ctx.destroy(linger=0)


def start(handshake_address: str, engine_count: int, engine_start_index: int = 0) -> ScriptedEngines:
    """``--adapter scripted_engine:start``: a correct engine."""
    return ScriptedEngines(handshake_address, engine_count, engine_start_index)


def __getattr__(name: str):
    """``--adapter scripted_engine:bug_<knob>``: an engine with one bug knob (hyphens allowed)."""
    if name.startswith("bug_") and name[4:] in BUGS:
        return lambda handshake_address, engine_count: ScriptedEngines(handshake_address, engine_count,
                                                                        bugs=[name[4:]])
    raise AttributeError(name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--handshake-address", required=True)
    p.add_argument("--engine-count", type=int, default=1)
    p.add_argument("--engine-start-index", type=int, default=0)
    p.add_argument("--bug", action="append", default=[], choices=sorted(BUGS))
    p.add_argument("--step-ms", type=float, default=1.0)
    a = p.parse_args(argv)
    import signal

    engines = ScriptedEngines(a.handshake_address, a.engine_count, a.engine_start_index, a.bug, a.step_ms)
    signal.signal(signal.SIGTERM, lambda *_: engines._stop.set())
    while engines.alive() and not engines._stop.is_set():
        engines.threads[0].join(0.1)
    engines.stop()
    crashed = any(getattr(rank, "crashed", False) for rank in engines.ranks)
    if crashed and "slow-exit" in a.bug:
        time.sleep(1.0)  # the behaviour modelled: sockets closed, the process exits a while later
    return 3 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
