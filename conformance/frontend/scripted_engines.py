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
    EngineCoreOutputs, EngineCoreRequest, EngineHandshakeMetadata, Hello, ProtocolError, Ready,
    UtilityOutput, UtilityRequest, UtilityResult, decode_input, encode_engine_dead, encode_handshake,
    encode_payload, engine_identity,
)

from ecp.spec.machine import (
    COORDINATOR, CoordinatorReady, CoordinatorSubscribe, EngineConnection, EngineHello, EngineReady, Outputs,
    StartWave, input_socket, output_socket,
)

from .output_forms import OutputForm
from .recorder import FrameRecord, Recorder
from .script import HANDSHAKE_FAULTS, EngineScript, Generation, StepOutputs, default_ready_payload


class EngineHandshakeFailed(Exception):
    """The frontend never answered HELLO (or answered with an undecodable INIT)."""


class ScriptedEngine:
    """One engine played by the harness (global DP rank ``rank``)."""

    def __init__(self, ctx: zmq.asyncio.Context, rank: int, engine_count: int, handshake_address: str,
                 script: EngineScript | None = None, recorder: Recorder | None = None) -> None:
        self.ctx = ctx
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
        self._identity = engine_identity(rank)
        #: the engine side of the protocol in recording mode: it follows every frame both ways, so
        #: every rule the frontend breaks is recorded (:attr:`violations`), whatever the case checks;
        #: what this engine sends is put through ``send_raw`` (scripts misbehave on purpose)
        self.machine = EngineConnection(rank, mode="record")
        self._handshake: zmq.asyncio.Socket | None = None
        self._inputs: list[zmq.asyncio.Socket] = []
        self._outputs: list[zmq.asyncio.Socket] = []
        self._extra: list[zmq.asyncio.Socket] = []   # coordinator sockets
        self._coordinator_sub: zmq.asyncio.Socket | None = None
        self._coordinator_push: zmq.asyncio.Socket | None = None
        #: every START_DP_WAVE the coordinator published after the gate, as (wave, exclude_engine_index)
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
        for sock in [self._handshake, *self._inputs, *self._outputs, *self._extra]:
            if sock is not None and not sock.closed:
                sock.close(linger=0)

    async def die(self) -> None:
        """Send ``ENGINE_CORE_DEAD`` on every output socket and stop serving (``ECP-OUT-8``)."""
        self.dead = True
        self.generation.abort_all_locally()
        for index, push in enumerate(self._outputs):
            frames = encode_engine_dead()
            self.machine.send_raw(output_socket(index), frames)
            self._record("out", "output", index, frames)
            await push.send_multipart(frames)

    @property
    def violations(self) -> list:
        """Every rule the frontend broke towards this engine so far (``ecp.spec.machine.Violation``)."""
        return self.machine.violations

    async def send_ready(self) -> None:
        """Say READY now (a script with ``send_ready=False`` withheld it; the case decides when)."""
        script = self.script
        [ready] = self.machine.send(EngineReady(self.rank, Ready(local=script.hello_local,
                                                                 headless=script.hello_headless)))
        self._record("out", "handshake", None, ready.frames)
        assert self._handshake is not None
        await self._handshake.send_multipart(ready.frames)

    async def send_to_coordinator(self, outputs: EngineCoreOutputs) -> None:
        """Send a DP control message (``wave_complete``/``start_wave``) on ``coordinator_output``."""
        if self._coordinator_push is None:
            raise RuntimeError(f"engine {self.rank}: INIT named no coordinator_output")
        [send] = self.machine.send(Outputs(self.rank, COORDINATOR, outputs))
        self._record("out", "coordinator", None, send.frames, message=outputs)
        await self._coordinator_push.send_multipart(send.frames)

    def release(self, request_ids: list[str] | None = None) -> None:
        """Let held requests finish (all when ``None``)."""
        self.generation.release(request_ids)
        self._wake.set()

    # -- handshake -------------------------------------------------------------------
    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        if kind == zmq.DEALER:
            sock.setsockopt(zmq.IDENTITY, self._identity)
        return sock

    async def _main(self, handshake_timeout: float) -> None:
        try:
            await self._do_handshake(handshake_timeout)
        except BaseException as exc:  # noqa: BLE001 - reported through wait_registered
            if not isinstance(exc, asyncio.CancelledError):
                self.failure = exc
            raise
        await self._serve()

    async def _do_handshake(self, timeout: float) -> None:
        script = self.script
        machine = self.machine
        hs = self._handshake = self._socket(zmq.DEALER)
        hs.connect(self.handshake_address)
        fault = script.handshake_fault
        if fault is not None and fault not in HANDSHAKE_FAULTS:
            raise ValueError(f"unknown handshake fault {fault!r} (known: {', '.join(HANDSHAKE_FAULTS)})")
        if fault in ("ready-first", "unknown-status"):
            await self._send_bad_handshake(fault)
        [hello] = machine.send(EngineHello(self.rank, Hello(local=script.hello_local,
                                                             headless=script.hello_headless)))
        self._record("out", "handshake", None, hello.frames)
        await hs.send_multipart(hello.frames)
        try:
            frames = await asyncio.wait_for(hs.recv_multipart(), timeout)
        except asyncio.TimeoutError:
            raise EngineHandshakeFailed(
                f"engine {self.rank}: no INIT within {timeout:.0f} s of HELLO at {self.handshake_address}"
            ) from None
        before = len(machine.violations)
        try:
            inits = [e for e in machine.receive("handshake", frames) if getattr(e, "init", None) is not None]
        except ProtocolError as exc:
            self._record("in", "handshake", None, frames, error=exc)
            raise EngineHandshakeFailed(f"engine {self.rank}: INIT does not decode: {exc}") from exc
        if not inits:   # recorded, not raised: the INIT could not be read
            err = machine.violations[before].error if len(machine.violations) > before else None
            self._record("in", "handshake", None, frames, error=err)
            raise EngineHandshakeFailed(f"engine {self.rank}: INIT does not decode: {err}")
        self.init = inits[0].init
        self._record("in", "handshake", None, frames, message=self.init)
        if fault == "hello-twice":
            await self._send_bad_handshake(fault)
        addresses = self.init.addresses
        for address in addresses.inputs:
            sock = self._socket(zmq.DEALER)
            sock.connect(address)
            self._inputs.append(sock)
        for address in addresses.outputs:
            sock = self._socket(zmq.PUSH)
            sock.connect(address)
            self._outputs.append(sock)
        payload = script.ready_payload
        if payload is None:
            payload = default_ready_payload(self.rank, self.engine_count)
        # the script's map, exactly as written (extra or missing keys on purpose): around the machine
        ready_frames = encode_payload(payload)
        for index, sock in enumerate(self._inputs):
            send = machine.send_raw(input_socket(index), ready_frames)
            self._record("out", "input", index, send.frames)
            await sock.send_multipart(send.frames)
        if addresses.coordinator_input is not None:
            await self._coordinator_gate(addresses.coordinator_input, addresses.coordinator_output, timeout)
        if script.send_ready:
            [ready] = machine.send(EngineReady(self.rank, Ready(local=script.hello_local,
                                                                 headless=script.hello_headless)))
            self._record("out", "handshake", None, ready.frames)
            await hs.send_multipart(ready.frames)
        self.registered.set()

    async def _send_bad_handshake(self, fault: str) -> None:
        """Put one handshake-order error on the handshake socket (``ECP-HS-7``). The machine is not
        told: its view stays the correct handshake the frontend sees around it."""
        script = self.script
        if fault == "ready-first":
            frame = encode_handshake(Ready(local=script.hello_local, headless=script.hello_headless))
        elif fault == "hello-twice":
            frame = encode_handshake(Hello(local=script.hello_local, headless=script.hello_headless))
        else:
            frame = msgspec.msgpack.encode({"status": "HOWDY", "local": script.hello_local,
                                            "headless": script.hello_headless})
        self._record("out", "handshake", None, [frame])
        assert self._handshake is not None
        await self._handshake.send_multipart([frame])

    async def _coordinator_gate(self, coordinator_input: str, coordinator_output: str | None,
                                timeout: float) -> None:
        """``ECP-HS-6``: subscribe to the coordinator and wait for its ``READY`` before READY.

        (vLLM's frontend starts a DP coordinator for DP > 1 with internal load
        balancing.) The engine only listens there; it sends no stats.
        """
        xsub = self._socket(zmq.XSUB)
        xsub.setsockopt(zmq.IDENTITY, self._identity)
        xsub.connect(coordinator_input)
        self._extra.append(xsub)
        self._coordinator_sub = xsub
        if coordinator_output is not None:
            push = self._socket(zmq.PUSH)
            push.connect(coordinator_output)
            self._extra.append(push)
            self._coordinator_push = push
        [subscribe] = self.machine.send(CoordinatorSubscribe(self.rank))
        self._record("out", "coordinator", None, subscribe.frames)
        await xsub.send_multipart(subscribe.frames)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EngineHandshakeFailed(f"engine {self.rank}: the coordinator never published READY")
            try:
                frames = await asyncio.wait_for(xsub.recv_multipart(), remaining)
            except asyncio.TimeoutError:
                continue
            self._record("in", "coordinator", None, frames)
            try:
                events = self.machine.receive("coordinator_input", frames)
            except ProtocolError:
                continue  # recorded above; the gate is still closed
            if any(isinstance(e, CoordinatorReady) for e in events):
                return

    # -- serving ---------------------------------------------------------------------
    async def _serve(self) -> None:
        tasks = [asyncio.ensure_future(self._receive(i, s)) for i, s in enumerate(self._inputs)]
        tasks.append(asyncio.ensure_future(self._generate()))
        if self._coordinator_sub is not None:
            tasks.append(asyncio.ensure_future(self._listen_coordinator(self._coordinator_sub)))
        self._tasks.extend(tasks)
        await asyncio.gather(*tasks)

    async def _listen_coordinator(self, sock: zmq.asyncio.Socket) -> None:
        """What the coordinator publishes after the gate: START_DP_WAVE (``ECP-DP-5``)."""
        while True:
            frames = await sock.recv_multipart()
            try:
                events = self.machine.receive("coordinator_input", frames)
            except ProtocolError as exc:
                self._record("in", "coordinator", None, frames, error=exc)
                continue
            self._record("in", "coordinator", None, frames, message=events[0] if events else None)
            for event in events:
                if isinstance(event, StartWave):
                    self.start_waves.append((event.wave.wave, event.wave.exclude_engine_index))

    async def _receive(self, index: int, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            # the machine judges every message against the whole protocol (recording mode)
            self.machine.receive(input_socket(index), frames)
            try:
                message = decode_input(frames)
            except ProtocolError as exc:
                self._record("in", "input", index, frames, error=exc)
                continue
            self._record("in", "input", index, frames, message=message)
            if self.dead:
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
                await self._send(call.client_index, EngineCoreOutputs(
                    engine_index=self.rank, timestamp=time.monotonic(),
                    utility_output=UtilityOutput(notice_id, None, UtilityResult(None, _notice(notice_id, self.rank)))))
            if call.method_name in self.script.silent_methods:
                return
            failure, value = self.script.answer(call.method_name, list(call.args))
            reply = UtilityOutput(call.call_id, failure,
                                  None if failure is not None else UtilityResult(None, value))
            await self._send(call.client_index, EngineCoreOutputs(
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
        if not 0 <= client_index < len(self._outputs):
            # ECP-ROB-4: unroutable outputs are dropped; the record shows the bad index.
            self._record("out", "output", client_index, [], error=None)
            return
        frames = self._output_form().frames(outputs)
        self.machine.send_raw(output_socket(client_index), frames)
        self._record("out", "output", client_index, frames, message=outputs)
        await self._outputs[client_index].send_multipart(frames)

    def _output_form(self) -> OutputForm:
        """The writer of the current script's output form (a case may reprogram the engine)."""
        script, form = self.script, self._form
        if form is None or (form.name, form.finish_code) != (script.output_form, script.finish_code):
            form = self._form = OutputForm(script.output_form, script.finish_code)
        return form

    def _record(self, direction: str, channel: str, client_index: int | None, frames: list[bytes],
                message: Any = None, error: ProtocolError | None = None) -> None:
        self.recorder.append(FrameRecord(time.monotonic(), self.rank, direction, channel, client_index,
                                         [bytes(f) for f in frames], message, error))


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
