"""A scripted engine: joins the frontend's handshake and follows its script.

The frontend under test owns the handshake (it binds ``{handshake_address}``,
like ``vllm serve --data-parallel-size-local 0``); each :class:`ScriptedEngine`
connects a DEALER with its 2-byte rank identity, says HELLO
(``local=false, headless=true`` by default), takes INIT, connects one DEALER
to every input address and one PUSH to every output address, registers with
its ready payload on each input, and says READY -- everything through
:mod:`ecp.spec`. Then it serves: ADDs produce tokens per its
:class:`~.script.EngineScript`, ABORTs stop requests, UTILITY calls get the
scripted answers, and :meth:`ScriptedEngine.die` sends ``ENGINE_CORE_DEAD``.
Output messages are written in the script's output form (:mod:`.output_forms`).
With a DP coordinator in INIT the engine passes its gate, keeps listening to
what the coordinator publishes (START_DP_WAVE) and can send it wave control
(:meth:`ScriptedEngine.send_to_coordinator`).

Every frame in and out lands in the engine's :class:`~.recorder.Recorder`.
A frame that does not decode is recorded with its error and the engine keeps
serving.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from ecp.spec import (
    ENGINE_CORE_DEAD, EngineCoreOutputs, EngineCoreRequest, EngineHandshakeMetadata, Hello, ProtocolError, Ready,
    HandshakeTimeout, StartDPWave, UtilityOutput, UtilityRequest, UtilityResult, encode_engine_dead, encode_payload,
)

from ecp.spec.handshake import COORDINATOR_READY, XSUB_SUBSCRIBE
from ecp.spec.machine import COORDINATOR, Outputs, Send, StartWave, input_socket, output_socket, parse_socket
from ecp.spec.peer import Deviation, EnginePeer, Stage, Step
from ecp.spec.peer.zmq_io import AsyncEngineSockets

from .engine_release import EngineRelease, engine_release
from .output_forms import OutputForm
from .recorder import FrameRecord, Recorder
from .script import HANDSHAKE_FAULTS, EngineScript, Generation, StepOutputs, default_ready_payload


class EngineHandshakeFailed(Exception):
    """The frontend never answered HELLO (or answered with an undecodable INIT)."""


class ScriptedEngine:
    """One engine played by the harness (global DP rank ``rank``)."""

    def __init__(self, ctx: zmq.asyncio.Context, rank: int, engine_count: int, handshake_address: str,
                 script: EngineScript | None = None, recorder: Recorder | None = None,
                 release: EngineRelease | None = None) -> None:
        """``release``: the vLLM release this engine speaks (its frames, its ready payload); 0.33 by default."""
        self.ctx = ctx
        self.speaks = release or engine_release()
        self.codec = self.speaks.codec
        self.rank = rank
        self.engine_count = engine_count
        self.handshake_address = handshake_address
        self.script = script or EngineScript()
        self.recorder = recorder or Recorder()
        self.generation = Generation(lambda: self.script)
        self.init: EngineHandshakeMetadata | None = None
        self.registered = asyncio.Event()   # ready payloads sent (and READY, if scripted)
        self.dead = False
        self.failure: BaseException | None = None
        #: the engine side of the protocol in recording mode: it follows every frame both ways, so
        #: every rule the frontend breaks is recorded (:attr:`violations`), whatever the case checks;
        #: what this engine sends is put through ``send_raw`` (scripts misbehave on purpose)
        script = self.script
        #: the engine skeleton in recording mode: its machine follows every frame both ways, so every
        #: rule the frontend breaks is recorded (:attr:`violations`), whatever the case checks; the
        #: script's ready payload and handshake faults go out around the rules (the machine follows)
        self.peer = EnginePeer(rank, hello=Hello(local=script.hello_local, headless=script.hello_headless),
                               ready=Ready(local=script.hello_local, headless=script.hello_headless),
                               payload=self._payload, mode="record", hold_ready=not script.send_ready,
                               deviate=self._deviate, codec=self.codec)
        self.machine = self.peer.machine
        self.io = AsyncEngineSockets(ctx, self.peer, linger_ms={"handshake": 0, "output": 0, "coordinator_output": 0},
                                     observe=self._observe)
        #: every START_DP_WAVE the coordinator published after the gate, as (new_wave, exclude_eng_index)
        self.start_waves: list[tuple[int, int | None]] = []
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self._form: OutputForm | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self, handshake_timeout: float) -> None:
        """Begin the handshake in the background; ``registered`` is set once it is done."""
        self._tasks.append(asyncio.ensure_future(self._main(handshake_timeout)))

    async def wait_registered(self, timeout: float) -> None:
        """Wait until registered; re-raise the handshake failure, if any."""
        waiter = asyncio.ensure_future(self.registered.wait())
        done, _ = await asyncio.wait([waiter, self._tasks[0]], timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            waiter.cancel()
        if self.failure is not None:
            raise self.failure
        if not self.registered.is_set():
            raise TimeoutError(f"engine {self.rank}: handshake not finished after {timeout:.0f} s")

    async def stop(self) -> None:
        """Cancel every task and close every socket (LINGER 0)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        self.io.close(0)

    async def die(self) -> None:
        """Send ``ENGINE_CORE_DEAD`` on every output socket and stop serving (``ECP-OUT-8``)."""
        self.dead = True
        self.generation.abort_all_locally()
        for index in range(self.peer.clients):
            await self.io.send([self.peer.send_raw(output_socket(index), encode_engine_dead())])

    @property
    def violations(self) -> list:
        """Every rule the frontend broke towards this engine so far (``ecp.spec.machine.Violation``)."""
        return self.machine.violations

    async def send_ready(self) -> None:
        """Say READY now (a script with ``send_ready=False`` withheld it; the case decides when)."""
        await self.io.send(self.peer.say_ready())

    async def send_to_coordinator(self, outputs: EngineCoreOutputs) -> None:
        """Send a DP control message (``wave_complete``/``start_wave``) on ``coordinator_output``."""
        if "coordinator_output" not in self.io.sockets:
            raise RuntimeError(f"engine {self.rank}: INIT named no coordinator_output")
        [send] = self.peer.send(Outputs(self.rank, COORDINATOR, outputs))
        self._record("out", "coordinator", None, send.frames, message=outputs)
        await self.io.sockets["coordinator_output"].send_multipart(send.frames)

    def release(self, request_ids: list[str] | None = None) -> None:
        """Let held requests finish (all when ``None``)."""
        self.generation.release(request_ids)
        self._wake.set()

    # -- handshake -------------------------------------------------------------------
    async def _main(self, handshake_timeout: float) -> None:
        try:
            await self._do_handshake(handshake_timeout)
        except BaseException as exc:  # noqa: BLE001 - reported through wait_registered
            if not isinstance(exc, asyncio.CancelledError):
                self.failure = exc
            raise
        await self._serve()

    async def _do_handshake(self, timeout: float) -> None:
        """The engine skeleton's handshake; the script's handshake fault replaces one step."""
        if self.script.handshake_fault is not None and self.script.handshake_fault not in HANDSHAKE_FAULTS:
            raise ValueError(f"unknown handshake fault {self.script.handshake_fault!r} "
                             f"(known: {', '.join(HANDSHAKE_FAULTS)})")
        try:
            await self.io.handshake(self.handshake_address, timeout, on_event=self._on_handshake_event)
        except HandshakeTimeout as exc:
            if exc.stage == Stage.INIT.value:
                raise EngineHandshakeFailed(f"engine {self.rank}: no INIT within {timeout:.0f} s of HELLO at "
                                            f"{self.handshake_address}") from None
            raise EngineHandshakeFailed(f"engine {self.rank}: the coordinator never published READY") from None
        except ProtocolError as exc:
            raise EngineHandshakeFailed(f"engine {self.rank}: INIT does not decode: {exc}") from exc
        self.init = self.peer.init
        self.registered.set()

    def _payload(self, init: EngineHandshakeMetadata) -> bytes:
        # the script's map, exactly as written (extra or missing keys on purpose): around the machine
        payload = self.script.ready_payload
        if payload is None:
            payload = default_ready_payload(self.rank, self.engine_count)
        [frame] = encode_payload(self.speaks.ready_payload(payload))
        return frame  # a ready payload carries no tensor: one frame

    def _deviate(self, step: Step, index: int | None) -> Deviation | None:
        """The script's handshake fault as a deviation from one step (``ECP-HS-7``): the frame it
        adds is hidden from the machine, whose view stays the correct handshake the frontend sees
        around it."""
        fault = self.script.handshake_fault
        script = self.script
        if step is Step.HELLO and fault in ("ready-first", "unknown-status"):
            if fault == "ready-first":
                frame = self.codec.encode_handshake(Ready(local=script.hello_local, headless=script.hello_headless))
            else:
                frame = msgspec.msgpack.encode({"status": "HOWDY", "local": script.hello_local,
                                                "headless": script.hello_headless})
            return Deviation(before=(Send("handshake", [frame]),))
        if step is Step.REGISTRATION and index == 0 and fault == "hello-twice":
            frame = self.codec.encode_handshake(Hello(local=script.hello_local, headless=script.hello_headless))
            return Deviation(before=(Send("handshake", [frame]),))
        return None

    def _on_handshake_event(self, event: Any) -> None:
        if isinstance(event, StartWave):  # a wave the coordinator published before its READY
            self.start_waves.append((event.wave.new_wave, event.wave.exclude_eng_index))

    def _observe(self, direction: str, socket: str, frames: list, outcome: Any) -> None:
        """Every message the handshake loop moves, into the recorder."""
        kind, index = parse_socket(socket)
        channel = "coordinator" if kind.startswith("coordinator") else kind
        message = error = None
        if isinstance(outcome, ProtocolError):
            error = outcome
        elif outcome:
            event = outcome[0]
            message = getattr(event, "init", None) or getattr(event, "wave", None)
        if message is None and error is None and frames:
            message = _handshake_view(self.codec, direction, channel, frames[-1])
        self._record(direction, channel, index, frames, message=message, error=error)

    # -- serving ---------------------------------------------------------------------
    async def _serve(self) -> None:
        sockets = self.io.sockets
        tasks = [asyncio.ensure_future(self._receive(input_socket(i), sockets[input_socket(i)]))
                 for i in range(self.peer.clients)]
        tasks.append(asyncio.ensure_future(self._generate()))
        if "coordinator_input" in sockets:
            tasks.append(asyncio.ensure_future(self._listen_coordinator(sockets["coordinator_input"])))
        self._tasks.extend(tasks)
        await asyncio.gather(*tasks)

    def _take(self, socket: str, frames: list[bytes]) -> tuple[Any, ProtocolError | None]:
        """What the machine made of one message: its event's message, or the error it recorded."""
        before = len(self.machine.violations)
        events = self.machine.receive(socket, frames)
        if events:
            event = events[0]
            for name in ("request", "request_ids", "call", "wave"):
                if hasattr(event, name):
                    value = getattr(event, name)
                    return (list(value) if name == "request_ids" else value), None
            return None, None
        recorded = self.machine.violations[before:]
        return None, (recorded[0].error if recorded else None)

    async def _listen_coordinator(self, sock: zmq.asyncio.Socket) -> None:
        """What the coordinator publishes after the gate: START_DP_WAVE (``ECP-DP-5``)."""
        while True:
            frames = await sock.recv_multipart()
            wave, error = self._take("coordinator_input", frames)
            self._record("in", "coordinator", None, frames, message=wave, error=error)
            if isinstance(wave, StartDPWave):
                self.start_waves.append((wave.new_wave, wave.exclude_eng_index))

    async def _receive(self, socket: str, sock: zmq.asyncio.Socket) -> None:
        index = parse_socket(socket)[1]
        while True:
            frames = await sock.recv_multipart()
            # the machine judges every message against the whole protocol (recording mode) and
            # hands over what it decoded
            message, error = self._take(socket, frames)
            self._record("in", "input", index, frames, message=message, error=error)
            if error is not None or self.dead:
                continue  # a dead engine only listens, so cases can see what still arrives
            await self._handle(message)

    async def _handle(self, message: Any) -> None:
        if isinstance(message, EngineCoreRequest):
            await self._send_step(self.generation.add(message))
            self._wake.set()
        elif isinstance(message, list):  # ABORT: the request ids
            await self._send_step(self.generation.abort(message))
        elif isinstance(message, UtilityRequest):
            call = message
            for notice_id in self.script.notice_call_ids:   # ECP-UTIL-12: replies nobody asked for
                await self._send(call.client_idx, EngineCoreOutputs(
                    engine_index=self.rank, timestamp=time.monotonic(),
                    utility_output=UtilityOutput(notice_id, None, UtilityResult(None, _notice(notice_id, self.rank)))))
            if call.method_name in self.script.silent_methods:
                return
            failure, value = self.script.answer(call.method_name, list(call.args))
            reply = UtilityOutput(call.call_id, failure,
                                  None if failure is not None else UtilityResult(None, value))
            await self._send(call.client_idx, EngineCoreOutputs(
                engine_index=self.rank, utility_output=reply, timestamp=time.monotonic()))

    async def _generate(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.generation.has_work() and not self.dead:
                await self._send_step(self.generation.step())
                # Yield between steps so ADDs and ABORTs keep flowing in.
                await asyncio.sleep(self.script.step_delay_s)

    async def _send_step(self, step: StepOutputs) -> None:
        for client_index, outputs in step.outputs.items():
            finished = step.finished.get(client_index) or None
            await self._send(client_index, EngineCoreOutputs(
                engine_index=self.rank, outputs=outputs, timestamp=time.monotonic(),
                finished_requests=finished))

    async def _send(self, client_index: int, outputs: EngineCoreOutputs) -> None:
        if not 0 <= client_index < self.peer.clients:
            # ECP-ROB-4: unroutable outputs are dropped; the record shows the bad index.
            self._record("out", "output", client_index, [], error=None)
            return
        frames = self._output_form().frames(outputs)
        socket = output_socket(client_index)
        self.machine.send_raw(socket, frames)
        self._record("out", "output", client_index, frames, message=outputs)
        await self.io.sockets[socket].send_multipart(frames)

    def _output_form(self) -> OutputForm:
        """The writer of the current script's output form (a case may reprogram the engine)."""
        script, form = self.script, self._form
        if form is None or (form.name, form.finish_code) != (script.output_form, script.finish_code):
            form = self._form = OutputForm(script.output_form, script.finish_code, codec=self.codec)
        return form

    def _record(self, direction: str, channel: str, client_index: int | None, frames: list[bytes],
                message: Any = None, error: ProtocolError | None = None) -> None:
        self.recorder.append(FrameRecord(time.monotonic(), self.rank, direction, channel, client_index,
                                         [bytes(f) for f in frames], message, error))


class _Named(str):
    def __repr__(self) -> str:
        return str(self)


#: the coordinator gate's frames are raw bytes, not msgpack (``ECP-HS-6``)
_GATE_FRAMES = {XSUB_SUBSCRIBE: _Named("subscription (01)"), COORDINATOR_READY: _Named("the coordinator's READY")}


def _handshake_view(codec: Any, direction: str, channel: str, frame: bytes) -> Any:
    """What a handshake-time frame says, for the transcript: the engine's HELLO or READY and its
    ready payload (they are the engine's own, so they decode), the frontend's INIT when the machine
    did not hand it over, the coordinator gate's raw frames and ENGINE_CORE_DEAD by name; ``None`` for
    anything else."""
    if channel == "coordinator" and bytes(frame) in _GATE_FRAMES:
        return _GATE_FRAMES[bytes(frame)]
    if channel == "output" and bytes(frame) == ENGINE_CORE_DEAD:
        return _Named("ENGINE_CORE_DEAD")
    try:
        if channel == "handshake":
            return codec.decode_handshake(frame) if direction == "out" else codec.decode_init(frame)
        if channel == "input" and direction == "out":
            return codec.decode_ready_response(frame)
    except ProtocolError:
        return None   # a fault the script injected on purpose: its bytes are in the record
    return None


def _notice(call_id: int, rank: int) -> object:
    """The value an engine-initiated notice carries, shaped as vLLM 0.33's engines send them: an
    elastic-EP notification (-1) is ``[type, dp_rank]``, a fault-tolerance status (-2) a map
    (vllm/v1/fault_tolerance/engine_core_sentinel.py); a frontend that understands them must still
    get what it expects, one that does not drops them (``ECP-UTIL-12``)."""
    if call_id == -1:
        return ["RECONFIGURE_FINISHED", rank]
    if call_id == -2:
        return {"id": rank, "status": "healthy"}
    return None
