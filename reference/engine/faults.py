"""Deliberate faults of the reference engine (``ecp engine --bug NAME``), in one layer.

The engine core and server implement the protocol correctly; the conformance
suite proves itself by running against an engine that breaks one rule on
purpose and checking that the cases naming that rule fail. Each fault is a
row of :data:`FAULTS` (its name, the clause it breaks, what it does) and is
carried out here, *between* the engine's protocol machine and the core: a fault
rewrites, drops or adds messages on their way in (:meth:`FaultLayer.on_input`)
or out (:meth:`FaultLayer.on_output`), so nothing in the core or the server
knows about it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import msgspec

from ecp.spec import (
    EngineCoreOutput, EngineCoreOutputs, FinishReason, Hello, ProtocolError, Ready, UtilityOutput, UtilityResult,
    decode_any, encode_outputs,
)
from ecp.spec.machine import COORDINATOR, Abort, Add, Event, SchedulerControl, UtilityCall

from ..faults import Fault, check_names, table
from .outbox import Outbound



FAULTS: dict[str, Fault] = table(
    Fault("ignore-abort-immediately", "ECP-REJECT-1", "runs abort_immediately requests like normal ones"),
    Fault("no-terminal-output", "ECP-OUT-1", "the last output of a finished request carries no finish_reason"),
    Fault("duplicate-output", "ECP-OUT-1", "every terminal output is sent twice"),
    Fault("inconsistent-is-sleeping", "ECP-UTIL-4", "odd ranks answer is_sleeping with the inverted value"),
    Fault("reset-prefix-cache-fails", "ECP-UTIL-5", "reset_prefix_cache always answers false"),
    Fault("crash-on-bad-frame", "ECP-ROB-1", "a malformed input frame kills the engine (ENGINE_CORE_DEAD)"),
    Fault("wrong-call-id", "ECP-UTIL-1", "utility replies carry call_id + 1"),
    Fault("ignore-abort", "ECP-ABORT-2", "client ABORTs are ignored; the request keeps producing tokens"),
    Fault("bare-utility-result", "ECP-UTIL-2", "utility results are sent as bare values, not [type_info, value]"),
    Fault("wave-complete-to-client", "ECP-OUT-6", "wave_complete is sent to client 0 instead of the coordinator"),
    Fault("tokens-after-finish", "ECP-OUT-1", "one more token output follows every terminal output"),
    Fault("no-generate-task", "ECP-HS-13", "get_supported_tasks answers without \"generate\""),
    Fault("error-not-finished", "ECP-OUT-5", "ERROR outputs leave their id out of finished_requests"),
    Fault("finish-reason-out-of-range", "ECP-OUT-4", "LENGTH is sent as finish_reason 7"),
    Fault("short-output-arrays", "ECP-FRAME-3", "output arrays are cut after their last non-nil element"),
    Fault("outputs-wrapped", "ECP-FRAME-2", "each EngineCoreOutputs payload is wrapped as [0, payload]"),
    Fault("truncated-request-ids", "ECP-FRAME-10", "outputs carry request ids cut to 32 characters"),
    Fault("paused-add-not-retryable", "ECP-REQ-7", "the engine_paused ERROR says retryable: false"),
    Fault("tensor-shape-mismatch", "ECP-FRAME-7", "logprob tensors claim one row more than their data holds"),
    Fault("tensors-inline", "ECP-FRAME-8", "tensor buffers of 256 bytes or more are sent inline"),
    Fault("no-stop-reason", "ECP-REQ-5", "a request stopped by a stop token carries no stop_reason"),
    Fault("no-logprobs", "ECP-HS-4", "returns no logprobs (new_logprobs nil) without declaring that it lacks them"),
    Fault("ignore-stamped-wave", "ECP-DP-5", "the current_wave stamped on an ADD is ignored (read as 0)"),
    Fault("abort-immediately-paused-error", "ECP-REJECT-5",
          "while generation is paused, an abort_immediately ADD is answered with an engine_paused ERROR"),
    Fault("duplicate-error-finished", "ECP-OUT-5",
          "the ERROR for a duplicate of a running request lists its id in finished_requests"),
    Fault("rejected-add-retryable", "ECP-OUT-5", "the ERROR for a rejected ADD says retryable: true"),
    Fault("no-parallel-config-hash", "ECP-HS-5", "READY leaves out parallel_config_hash at DP > 1"),
    Fault("ready-flags-differ", "ECP-HS-1", "READY says the opposite local and headless of HELLO"),
    Fault("local-and-headless", "ECP-HS-1", "HELLO and READY say local=true and headless=true at once"),
    Fault("sleep-default-keep", "ECP-UTIL-8", "sleep without a mode argument runs with mode keep (not abort)"),
    Fault("pause-default-keep", "ECP-UTIL-8",
          "pause_generation and pause_scheduler without a mode argument run with mode keep (not abort)"),
    Fault("refused-utility-succeeds", "ECP-ROB-1",
          "a UTILITY that failed to decode is answered with a result (nil) instead of its failure"),
    Fault("drop-adds-while-asleep", "ECP-UTIL-8", "ADDs that arrive while the engine sleeps are dropped unanswered"),
    Fault("wave-complete-from-every-rank", "ECP-DP-5",
          "every rank, not only rank 0, sends wave_complete to the coordinator when it is idle"),
    Fault("keep-pause-refuses", "ECP-REQ-7",
          "pause_generation with mode keep runs as mode wait: new ADDs are refused with engine_paused"),
    Fault("length-before-stop", "ECP-REQ-5",
          "a stop token that is also the max_tokens-th token ends its request with LENGTH"),
    Fault("negative-token-ids", "ECP-OUT-3", "every output token id t is sent as -1 - t"),
    Fault("error-on-input-socket", "ECP-HS-3",
          "the ERROR answering an undecodable ADD goes out on the input socket it came in on, not its output"),
)


class InjectedCrash(Exception):
    """Raised by the ``crash-on-bad-frame`` fault: the server takes its fatal exit."""


class FaultLayer:
    """The faults an engine runs with; inactive (``bool(layer)`` is false) without any."""

    def __init__(self, names: Iterable[str], engine_index: int) -> None:
        self.names = check_names(names, FAULTS, "engine")
        self.engine_index = engine_index
        #: call_id -> method name of the pending utility calls a fault rewrites the reply of
        self._calls: dict[int, str] = {}
        #: the engine's sleep/pause state as the utility calls that went in move the spec's table (a
        #: wake_up is read as waking every tag: the layer does not wait for its reply)
        self._control = SchedulerControl()
        #: ids in flight and the wave they run in, for a rank other than 0 that reports its own waves
        self._inflight: set[str] = set()
        self._wave = 0
        #: the methods whose left-out mode a fault reads as "keep"
        self._keep_by_default = ({"sleep"} if "sleep-default-keep" in self.names else set()) | (
            {"pause_generation", "pause_scheduler"} if "pause-default-keep" in self.names else set())
        #: request id -> [max_tokens, tokens sent so far], for the faults that judge the length cap
        self._lengths: dict[str, list[int]] = {}

    def __bool__(self) -> bool:
        return bool(self.names)

    # ------------------------------------------------------------------ handshake
    def on_hello(self, hello: Hello) -> Hello:
        """The HELLO the engine sends instead of ``hello``."""
        if "local-and-headless" in self.names:
            return msgspec.structs.replace(hello, local=True, headless=True)
        return hello

    def on_ready(self, ready: Ready) -> Ready:
        """The READY the engine sends instead of ``ready``."""
        if "no-parallel-config-hash" in self.names:
            ready = msgspec.structs.replace(ready, parallel_config_hash=None)
        if "ready-flags-differ" in self.names:
            ready = msgspec.structs.replace(ready, local=not ready.local, headless=not ready.headless)
        if "local-and-headless" in self.names:
            ready = msgspec.structs.replace(ready, local=True, headless=True)
        return ready

    def misroutes(self, payload: object) -> bool:
        """``error-on-input-socket``: whether ``payload`` (an output) goes out on the input socket instead."""
        return "error-on-input-socket" in self.names and isinstance(payload, EngineCoreOutputs) and any(
            o.error is not None and o.error.code == "invalid_request" for o in payload.outputs)

    # ------------------------------------------------------------------ in
    def on_bad_frame(self, error: ProtocolError) -> None:
        """A frame that failed to decode: ``crash-on-bad-frame`` dies of it."""
        if "crash-on-bad-frame" in self.names:
            raise InjectedCrash(f"bad input frame ({error.clause})")
        if getattr(error, "call_id", None) is not None and "refused-utility-succeeds" in self.names:
            self._calls[error.call_id] = "(refused)"

    def on_input(self, event: Event) -> Event | None:
        """The machine's event the core gets instead of ``event`` (``None``: it never arrives)."""
        if isinstance(event, Add) and event.request.sampling_params and "length-before-stop" in self.names:
            self._lengths[event.request.request_id] = [event.request.sampling_params.max_tokens or 0, 0]
        if isinstance(event, Add) and event.request.abort_immediately \
                and "ignore-abort-immediately" in self.names:
            return dataclasses.replace(event, request=msgspec.structs.replace(event.request,
                                                                              abort_immediately=False))
        if isinstance(event, Abort) and "ignore-abort" in self.names:
            return None
        if isinstance(event, Add) and event.request.current_wave and "ignore-stamped-wave" in self.names:
            return dataclasses.replace(event, request=msgspec.structs.replace(event.request, current_wave=0))
        if isinstance(event, Add) and event.request.abort_immediately and self._control.refusing \
                and "abort-immediately-paused-error" in self.names:
            # answered as if it were an ordinary ADD: the core refuses those while paused
            return dataclasses.replace(event, request=msgspec.structs.replace(event.request,
                                                                              abort_immediately=False))
        if isinstance(event, UtilityCall) and event.call.method_name in self._keep_by_default:
            args, at = list(event.call.args), 1 if event.call.method_name == "sleep" else 0
            if len(args) <= at:
                args = (args or [1])[:at] + ["keep"]
                event = dataclasses.replace(event, call=msgspec.structs.replace(event.call, args=args))
        if isinstance(event, UtilityCall) and event.call.method_name == "pause_generation" \
                and list(event.call.args)[:1] == ["keep"] and "keep-pause-refuses" in self.names:
            args = ["wait", *list(event.call.args)[1:]]
            event = dataclasses.replace(event, call=msgspec.structs.replace(event.call, args=args))
        if isinstance(event, Add) and self._control.asleep and "drop-adds-while-asleep" in self.names:
            return None
        if isinstance(event, Add) and self.engine_index != 0 and "wave-complete-from-every-rank" in self.names:
            self._inflight.add(event.request.request_id)
            self._wave = max(self._wave, event.request.current_wave)
        if isinstance(event, UtilityCall):
            method = event.call.method_name
            self._control.carried_out(method, event.call.args, True if method == "wake_up" else None)
            if method == "get_supported_tasks" and "no-generate-task" in self.names:
                self._calls[event.call.call_id] = method
            if (method == "is_sleeping" and "inconsistent-is-sleeping" in self.names) or \
                    (method == "reset_prefix_cache" and "reset-prefix-cache-fails" in self.names):
                self._calls[event.call.call_id] = method
        return event

    # ------------------------------------------------------------------ out
    def on_output(self, ob: Outbound) -> list[Outbound]:
        """What goes out instead of ``ob`` (``payload`` may become a raw list for the encoder)."""
        msg = ob.payload
        if not isinstance(msg, EngineCoreOutputs):
            return [ob]
        names = self.names
        if msg.wave_complete is not None and ob.client_index == COORDINATOR and "wave-complete-to-client" in names:
            return [type(ob)(0, msg)]
        if msg.utility_output is not None:
            return [self._reply(ob, msg)]
        extra: list[Outbound] = []
        outs: list[EngineCoreOutput] = []
        finished = msg.finished_requests
        for out in msg.outputs:
            if out.finish_reason == FinishReason.ERROR and finished and "error-not-finished" in names:
                finished = {rid for rid in finished if rid != out.request_id} or None
            if out.error is not None and out.error.code == "duplicate_request_id" \
                    and "duplicate-error-finished" in names:
                finished = (finished or set()) | {out.request_id}
            if out.error is not None and out.error.code != "engine_paused" and "rejected-add-retryable" in names:
                out = msgspec.structs.replace(out, error=msgspec.structs.replace(out.error, retryable=True))
            if out.error is not None and out.error.code == "engine_paused" and "paused-add-not-retryable" in names:
                out = msgspec.structs.replace(out, error=msgspec.structs.replace(out.error, retryable=False))
            if "no-stop-reason" in names and out.finish_reason == FinishReason.STOP:
                out = msgspec.structs.replace(out, stop_reason=None)
            if "no-logprobs" in names and out.new_logprobs is not None:
                out = msgspec.structs.replace(out, new_logprobs=None)
            if "negative-token-ids" in names and out.new_token_ids:
                out = msgspec.structs.replace(out, new_token_ids=[-1 - t for t in out.new_token_ids])
            if "truncated-request-ids" in names and len(out.request_id) > 32:
                out = msgspec.structs.replace(out, request_id=out.request_id[:32])
            if out.request_id in self._lengths:
                length = self._lengths[out.request_id]
                length[1] += len(out.new_token_ids)
                if out.finish_reason is not None:
                    del self._lengths[out.request_id]
                    if out.finish_reason == FinishReason.STOP and length[1] == length[0]:
                        out = msgspec.structs.replace(out, finish_reason=FinishReason.LENGTH, stop_reason=None)
            if out.finish_reason is not None:
                if "duplicate-output" in names:
                    extra.append(self._single(ob, msg, out))
                if "tokens-after-finish" in names:
                    token = out.new_token_ids[-1] if out.new_token_ids else 17
                    extra.append(self._single(ob, msg, EngineCoreOutput(out.request_id, [token])))
                if "no-terminal-output" in names:
                    out = msgspec.structs.replace(out, finish_reason=None, stop_reason=None)
            outs.append(out)
        if self._inflight:
            ended = {out.request_id for out in outs if out.finish_reason is not None} & self._inflight
            self._inflight -= ended
            if ended and not self._inflight:  # this rank is idle: it reports the wave as if it were rank 0
                extra.append(type(ob)(COORDINATOR, EngineCoreOutputs(engine_index=self.engine_index,
                                                                     wave_complete=self._wave)))
                self._wave += 1
        if outs != msg.outputs or finished != msg.finished_requests:
            msg = msgspec.structs.replace(msg, outputs=outs, finished_requests=finished)
        return [type(ob)(ob.client_index, self._raw(msg)), *extra]

    def _raw(self, msg: EngineCoreOutputs) -> EngineCoreOutputs | list:
        """The faults that break the encoding itself turn the message into the raw list the encoder sends."""
        names = self.names
        if not {"finish-reason-out-of-range", "short-output-arrays", "outputs-wrapped", "tensor-shape-mismatch",
                "tensors-inline"} & names:
            return msg
        raw = _array_form(msg)
        for out in raw[1]:
            if out[5] == FinishReason.LENGTH and "finish-reason-out-of-range" in names:
                out[5] = 7
            if isinstance(out[2], list) and "tensor-shape-mismatch" in names:
                out[2][0][1][0] += 1  # logprob_token_ids: [N, K+1] -> [N+1, K+1]
        if "short-output-arrays" in names:
            raw[1] = [_cut(out) for out in raw[1]]
            raw = _cut(raw)
        return [0, raw] if "outputs-wrapped" in names else raw

    def _single(self, ob: Outbound, msg: EngineCoreOutputs, out: EngineCoreOutput) -> Outbound:
        return type(ob)(ob.client_index, EngineCoreOutputs(engine_index=msg.engine_index, outputs=[out],
                                                  timestamp=msg.timestamp, weight_version=msg.weight_version))

    def _reply(self, ob: Outbound, msg: EngineCoreOutputs) -> Outbound:
        client, uo = ob.client_index, msg.utility_output
        call_id, result = uo.call_id, uo.result
        method = self._calls.pop(call_id, None)
        if method == "(refused)":
            uo, result = UtilityOutput(call_id, None, UtilityResult(None, None)), UtilityResult(None, None)
        if result is not None and uo.failure_message is None:
            if method == "is_sleeping" and self.engine_index % 2 == 1:
                result = UtilityResult(None, not result.value)
            elif method == "get_supported_tasks":
                result = UtilityResult(result.type_info, [t for t in result.value if t != "generate"] + ["embed"])
            elif method == "reset_prefix_cache":
                result = UtilityResult(None, False)
        if "wrong-call-id" in self.names:
            call_id = (call_id + 1) % 2**64
        if "short-output-arrays" in self.names:
            return type(ob)(client, _cut([msg.engine_index, [], None, msg.timestamp,
                                          [call_id, uo.failure_message, None if result is None else
                                           [result.type_info, result.value]], None, None, None, None]))
        if "bare-utility-result" in self.names and uo.failure_message is None:
            value: Any = None if result is None else result.value
            return type(ob)(client, [msg.engine_index, [], None, msg.timestamp, [call_id, None, value],
                                     None, None, None, None])
        return type(ob)(client, msgspec.structs.replace(
            msg, utility_output=UtilityOutput(call_id, uo.failure_message, result)))


def _cut(array: list) -> list:
    """``array`` without its trailing nil elements (what a sender that drops defaults would send)."""
    end = len(array)
    while end > 1 and array[end - 1] is None:
        end -= 1
    return array[:end]


def _array_form(msg: EngineCoreOutputs) -> list:
    """``msg`` as the plain array its encoding is, every tensor buffer inline (ext 3), so a fault can
    rewrite it and the encoder send it as one frame."""
    frames = encode_outputs(msg)
    raw = decode_any(frames[0])
    for out in raw[1]:
        for field in (2, 3):  # new_logprobs, new_prompt_logprobs_tensors
            if isinstance(out[field], list):
                for tensor in out[field]:
                    if isinstance(tensor, list) and len(tensor) == 3 and isinstance(tensor[0], str):
                        data = frames[tensor[2]] if isinstance(tensor[2], int) else tensor[2]
                        tensor[2] = msgspec.msgpack.Ext(3, bytes(data))
    return raw
