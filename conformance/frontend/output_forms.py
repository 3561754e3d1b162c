"""How a scripted engine writes its output messages: the encodings a frontend must read.

An :class:`OutputForm` turns the engine's typed :class:`~ecp.spec.EngineCoreOutputs`
into the frames it puts on the wire. ``"full"`` is :func:`ecp.spec.encode_outputs`
itself (full-length arrays, float64, the smallest headers, tensors by the 256-byte
threshold); every other form starts from those frames and rewrites them into
another encoding that a conforming receiver reads as the same message
(spec/PROTOCOL.md §3), or, for ``finish_code``, into one it must refuse:

==================  ==============  ===================================================================
form                clause          what changes
==================  ==============  ===================================================================
``short``           ECP-FRAME-4     ``EngineCoreOutputs`` and each ``EngineCoreOutput`` cut after their
                                    last non-default element (never below the required fields)
``long``            ECP-FRAME-4     both arrays with two unknown trailing elements
``scalars``         ECP-FRAME-5     the timestamp an int or a float32 (alternately); scheduler stats with
                                    an int for ``kv_cache_usage``; every map, even a small one, under a
                                    map16 header; ``finished_requests`` (a set) as an array
``wire-forms``      ECP-FRAME-11    every int as int64 (``d3``), every header at its widest, every float a
                                    float32 holds exactly as float32, an integral timestamp as an int
``python``          ECP-COMPAT-2    what vLLM 0.33's Python engine adds: QUEUED/SCHEDULED events on a
                                    request's first output, its recorded scheduler stats (map16)
``rust``            ECP-COMPAT-2    the Rust engine's forms: float32 floats, timestamps in UNIX seconds,
                                    fixmap headers
``tensors-inline``  ECP-FRAME-7     every tensor buffer inline (msgpack ext 3), whatever its size
``tensors-aux``     ECP-FRAME-7     every tensor buffer in an aux frame, whatever its size
``sample-full``     ECP-COMPAT-4    every field of the release's ``EngineCoreOutputs`` and
                                    ``EngineCoreOutput`` that is not bound to the request (:data:`BOUND`)
                                    set, to the value of the release's full sample
                                    (:func:`ecp.spec.layout.wire.sample`, as ``ecp spec diff`` tries them)
``sample-sparse``   ECP-COMPAT-4    those fields at the release's defaults and both arrays cut after their
                                    last required element: nothing optional on the wire
==================  ==============  ===================================================================

``finish_code`` (any form): a terminal LENGTH output carries this raw ``finish_reason``
instead (``ECP-OUT-4``: a value outside 0..4 is a decode error for the receiver).
``codec`` (any form): the release the engine speaks (:func:`ecp.spec.profile.wire_codec`): the
frames every form starts from are that release's, and ``short`` cuts by that release's defaults.
The elements the forms rewrite (``outputs``, ``scheduler_stats``, ``timestamp``; ``new_logprobs``,
``finish_reason``, ``events``) sit at the same index in every shipped release.
Sans-IO: frames in, frames out.
"""

from __future__ import annotations

import struct
import time
from typing import Any, Callable

import msgspec

from ecp.spec import EngineCoreOutput, EngineCoreOutputs, FinishReason
from ecp.spec import codec as codec_033
from ecp.spec import VLLM_RELEASE
from ecp.spec import wireforms

#: the forms :class:`OutputForm` knows, each with the clause it exercises
FORMS: dict[str, str] = {
    "full": "ECP-FRAME-3", "short": "ECP-FRAME-4", "long": "ECP-FRAME-4", "scalars": "ECP-FRAME-5",
    "wire-forms": "ECP-FRAME-11",
    "python": "ECP-COMPAT-2", "rust": "ECP-COMPAT-2", "tensors-inline": "ECP-FRAME-7",
    "tensors-aux": "ECP-FRAME-7", "sample-full": "ECP-COMPAT-4", "sample-sparse": "ECP-COMPAT-4",
}

#: fields the sample forms leave as the engine wrote them: they say what the output means for its request
#: (its id, tokens, end, the logprobs or tensors it asked for, an error) or are DP control for the
#: coordinator (``ECP-DP-5``), so a sample value there would change the request, not its message's shape
BOUND: dict[str, frozenset[str]] = {
    "EngineCoreOutputs": frozenset({"engine_index", "outputs", "utility_output", "finished_requests",
                                    "wave_complete", "start_wave"}),
    "EngineCoreOutput": frozenset({"request_id", "new_token_ids", "new_logprobs", "new_prompt_logprobs_tensors",
                                   "pooling_output", "finish_reason", "stop_reason", "routed_experts",
                                   "new_sampling_mask", "prompt_token_id_logprobs", "error"}),
}

#: what the ``long`` form appends to every array struct (elements a future release might add)
TRAILING = ["ecp-future-field", {"ecp": [1, 2]}]

#: EngineCoreOutput's index of ``new_logprobs`` and of ``finish_reason``; EngineCoreOutputs' of
#: ``outputs``, ``scheduler_stats`` and ``timestamp``
_NEW_LOGPROBS, _FINISH_REASON = 2, 5
_OUTPUTS, _STATS, _TIMESTAMP = 1, 2, 3

#: the scheduler stats vLLM 0.33's Python engine sent after a request's first token (the recorded
#: traffic in spec/vectors; 18 keys, so a map16 header)
PYTHON_SCHEDULER_STATS: dict[str, Any] = {
    "num_running_reqs": 1, "num_waiting_reqs": 0, "num_skipped_waiting_reqs": 0,
    "num_kv_fetch_reqs_by_stage": {"waiting_to_start": 0, "in_progress": 0, "completed_waiting": 0},
    "step_counter": 0, "current_wave": 0, "kv_cache_usage": 0.0001220852154804053, "iteration_details": None,
    "prefix_cache_stats": {"reset": False, "requests": 1, "queries": 4, "hits": 0, "preempted_requests": 0,
                           "preempted_queries": 0, "preempted_hits": 0, "hits_by_source": {}},
    "connector_prefix_cache_stats": None, "kv_cache_eviction_events": [], "spec_decoding_stats": None,
    "kv_connector_stats": None, "ec_connector_stats": None, "waiting_lora_adapters": {},
    "running_lora_adapters": {}, "cudagraph_stats": None, "perf_stats": None,
}

#: EngineCoreEventType QUEUED and SCHEDULED
_QUEUED, _SCHEDULED = 1, 2


class F32(float):
    """A float the packer writes as msgpack float32 (``ca``)."""


class Map16(dict):
    """A map the packer writes under a map16 header (``de``) whatever its size."""


def _defaults(struct_type: type) -> list[tuple[bool, Any]]:
    """(required, default) of each field of an array struct, from its ``ecp.spec`` definition."""
    out = []
    for f in msgspec.structs.fields(struct_type):
        if f.default is not msgspec.NODEFAULT:
            out.append((False, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            out.append((False, f.default_factory()))
        else:
            out.append((True, None))
    return out


_OUTPUTS_FIELDS = _defaults(EngineCoreOutputs)
_OUTPUT_FIELDS = _defaults(EngineCoreOutput)


def _cut(array: list, fields: list[tuple[bool, Any]]) -> list:
    """``array`` without its trailing default-valued elements, keeping every required field."""
    required = sum(1 for req, _ in fields if req)
    end = len(array)
    while end > required and end <= len(fields) and array[end - 1] == fields[end - 1][1] \
            and type(array[end - 1]) is type(fields[end - 1][1]):
        end -= 1
    return array[:end]


def _ext(code: int, data: memoryview) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, bytes(data))


def raw_outputs(frames: list[bytes]) -> list:
    """The payload of an output message as plain msgpack values (ext types kept as ``Ext``)."""
    return msgspec.msgpack.decode(frames[0], ext_hook=_ext)


def pack(value: Any) -> bytes:
    """msgpack for ``value`` in the smallest form, except :class:`F32` (float32) and :class:`Map16`."""
    out = bytearray()
    _pack(value, out)
    return bytes(out)


def _pack(v: Any, out: bytearray) -> None:
    if v is None:
        out += b"\xc0"
    elif v is True or v is False:
        out += b"\xc3" if v else b"\xc2"
    elif isinstance(v, int):
        out += msgspec.msgpack.encode(v)
    elif isinstance(v, F32):
        out += b"\xca" + struct.pack(">f", v)
    elif isinstance(v, float):
        out += b"\xcb" + struct.pack(">d", v)
    elif isinstance(v, (str, bytes, msgspec.msgpack.Ext)):
        out += msgspec.msgpack.encode(v)
    elif isinstance(v, (list, tuple)):
        n = len(v)
        out += bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n) if n < 1 << 16 \
            else b"\xdd" + struct.pack(">I", n)
        for item in v:
            _pack(item, out)
    elif isinstance(v, dict):
        n = len(v)
        if isinstance(v, Map16) or 16 <= n < 1 << 16:
            out += b"\xde" + struct.pack(">H", n)
        else:
            out += bytes([0x80 | n]) if n < 16 else b"\xdf" + struct.pack(">I", n)
        for key, item in v.items():
            _pack(key, out)
            _pack(item, out)
    else:
        raise TypeError(f"cannot pack {type(v).__name__}")


def _map16(v: Any) -> Any:
    """``v`` with every map (at any depth) marked for a map16 header."""
    if isinstance(v, dict):
        return Map16({k: _map16(x) for k, x in v.items()})
    if isinstance(v, list):
        return [_map16(x) for x in v]
    return v


def _floats32(v: Any) -> Any:
    """``v`` with every float (at any depth) written as float32."""
    if isinstance(v, float):
        return F32(v)
    if isinstance(v, dict):
        return {k: _floats32(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_floats32(x) for x in v]
    return v


def _tensors(raw: list) -> list[list]:
    """The ``[dtype, shape, data]`` tensors of every output's ``new_logprobs`` (the token ids, logprobs
    and ranks of LogprobsLists), as the lists inside ``raw`` (so they can be rewritten in place)."""
    found = []
    for out in raw[_OUTPUTS] if len(raw) > _OUTPUTS else []:
        logprobs = out[_NEW_LOGPROBS] if len(out) > _NEW_LOGPROBS else None
        if isinstance(logprobs, list):
            found += [t for t in logprobs[:3] if isinstance(t, list) and len(t) == 3]
    return found


class OutputForm:
    """One engine's writer of output messages in the form ``name`` (stateful: the ``python`` form
    marks each request's first output, the ``scalars`` form alternates the timestamp's type)."""

    def __init__(self, name: str = "full", finish_code: int | None = None, codec: Any = None) -> None:
        if name not in FORMS:
            raise ValueError(f"unknown output form {name!r} (known: {', '.join(FORMS)})")
        self.name = name
        self.finish_code = finish_code
        self._encode = (codec or codec_033).encode_outputs
        profile = getattr(codec, "profile", None)
        self._fields = ((_defaults(profile.messages["EngineCoreOutputs"]), _defaults(profile.messages["EngineCoreOutput"]))
                        if profile is not None else (_OUTPUTS_FIELDS, _OUTPUT_FIELDS))
        self._profile = profile
        self._seen: set[str] = set()
        self._count = 0
        self._rewrite: Callable[[list, list[bytes]], tuple[Any, list[bytes]]] = getattr(
            self, "_" + name.replace("-", "_"))

    def frames(self, msg: EngineCoreOutputs) -> list[bytes]:
        """The frames of ``msg`` in this form."""
        frames = self._encode(msg)
        if self.name == "full" and self.finish_code is None:
            return frames
        self._count += 1
        raw = raw_outputs(frames)
        if self.finish_code is not None:
            for out in raw[_OUTPUTS]:
                if out[_FINISH_REASON] == int(FinishReason.LENGTH):
                    out[_FINISH_REASON] = self.finish_code
        payload, aux = self._rewrite(raw, list(frames[1:]))
        return [payload if isinstance(payload, bytes) else pack(payload), *aux]

    # -- the forms (raw payload and aux frames in; payload, raw or packed, and aux frames out) ------
    def _full(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        return raw, aux

    def _wire_forms(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        tree = wireforms.parse(pack(raw))
        if self._count % 2:  # every other message: an integral timestamp, written as an int where a float is declared
            ts = tree.items[_TIMESTAMP]
            if ts.kind == "float":
                tree.items[_TIMESTAMP] = wireforms.Node("float", float(int(ts.value)), 0xCB)
        return wireforms.write(tree, ints="int64", headers="widest", floats="float32",
                               int_for_float=lambda path: path == (_TIMESTAMP,)), aux

    def _short(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        outputs_fields, output_fields = self._fields
        raw[_OUTPUTS] = [_cut(out, output_fields) for out in raw[_OUTPUTS]]
        return _cut(raw, outputs_fields), aux

    def _long(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        raw[_OUTPUTS] = [[*out, *TRAILING] for out in raw[_OUTPUTS]]
        return [*raw, *TRAILING], aux

    def _scalars(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        ts = raw[_TIMESTAMP]
        raw[_TIMESTAMP] = int(ts) if self._count % 2 else F32(ts)
        if raw[_OUTPUTS] and raw[_STATS] is None:
            stats = dict(PYTHON_SCHEDULER_STATS)
            stats["kv_cache_usage"] = 0   # an int where a float is declared
            raw[_STATS] = stats
        return _map16(raw), aux

    def _python(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        now = time.monotonic()
        for out in raw[_OUTPUTS]:
            if out[0] not in self._seen:
                self._seen.add(out[0])
                out[7] = [{"type": _QUEUED, "timestamp": now}, {"type": _SCHEDULED, "timestamp": now}]
        if raw[_OUTPUTS] and raw[_STATS] is None:
            raw[_STATS] = dict(PYTHON_SCHEDULER_STATS)
        return msgspec.msgpack.encode(raw), aux

    def _rust(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        raw[_TIMESTAMP] = time.time()
        return _floats32(raw), aux

    def _tensors_inline(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        frames = [b"", *aux]
        for tensor in _tensors(raw):
            if isinstance(tensor[2], int):
                tensor[2] = msgspec.msgpack.Ext(3, frames[tensor[2]])
        return msgspec.msgpack.encode(raw), []

    def _sample_full(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        return self._overlay(raw, "full"), aux

    def _sample_sparse(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        outputs_fields, output_fields = self._fields
        raw = self._overlay(raw, "sparse")
        raw[_OUTPUTS] = [_cut(out, output_fields) for out in raw[_OUTPUTS]]
        return _cut(raw, outputs_fields), aux

    def _overlay(self, raw: list, mode: str) -> list:
        """``raw`` with every field outside :data:`BOUND` replaced by the release's ``mode`` sample;
        in the full sample, scheduler stats are those a real engine sent (:data:`PYTHON_SCHEDULER_STATS`,
        the release's keys): the layouts type some of their map keys as strings where vLLM decodes an
        enum (``prefix_cache_stats.hits_by_source``), so their sample is no message vLLM could send."""
        layout = self._layout()
        for out in raw[_OUTPUTS]:
            _put(out, layout, "EngineCoreOutput", mode)
        if mode == "full" and not _request_batch(raw, layout):
            # a utility reply or DP control message takes none of a request batch's fields (stats,
            # weight_version): a mixture breaks ECP-OUT-6, and vllm-rs refuses it as a decode error
            return raw
        _put(raw, layout, "EngineCoreOutputs", mode)
        if mode == "full" and len(raw) > _STATS:
            keys = {f.name for f in layout.messages["SchedulerStats"].fields}
            raw[_STATS] = {k: v for k, v in PYTHON_SCHEDULER_STATS.items() if k in keys}
        return raw

    def _layout(self) -> Any:
        if self._profile is not None:
            return self._profile.layout
        from ecp.spec.profile import shipped_profile

        return shipped_profile(VLLM_RELEASE).layout

    def _tensors_aux(self, raw: list, aux: list[bytes]) -> tuple[Any, list[bytes]]:
        for tensor in _tensors(raw):
            if isinstance(tensor[2], msgspec.msgpack.Ext):
                aux.append(tensor[2].data)
                tensor[2] = len(aux)   # index 0 is the payload frame
        return msgspec.msgpack.encode(raw), aux


def _request_batch(raw: list, layout: Any) -> bool:
    """Whether the raw ``EngineCoreOutputs`` is a request batch: no utility reply, no DP control
    (``ECP-OUT-6``)."""
    for f in layout.messages["EngineCoreOutputs"].fields:
        if f.name in ("utility_output", "wave_complete", "start_wave") and f.index < len(raw) \
                and raw[f.index] is not None:
            return False
    return True


def _put(array: list, layout: Any, message: str, mode: str) -> None:
    """Overwrite, in place, each element of the array struct ``message`` outside :data:`BOUND` with its value
    in the layout's ``mode`` sample."""
    from ecp.spec.layout.wire import sample

    values = sample(layout, message, mode)  # type: ignore[arg-type]
    for f in layout.messages[message].fields:
        if f.name not in BOUND[message] and f.index < len(array):
            array[f.index] = values[f.index]
