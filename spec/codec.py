"""The sans-IO framing codec: frame lists in, typed messages out, and back.

Nothing here touches a socket. A transport hands :func:`decode_input` the
frames an engine DEALER received (``[type, payload, *aux]``), or hands
:func:`decode_outputs` the frames a frontend PULL received (``[payload, *aux]``),
and sends what the ``encode_*`` functions return. Identity frames are the
transport's business (a ROUTER prepends/strips them).

Encoding produces the bytes vLLM 0.33's ``MsgpackEncoder`` produces for the
same values. Decoding is as tolerant as vLLM's decoder (``ECP-FRAME-4``/``-5``)
and strictly safer: ext types 1/2 are refused (``ECP-SEC-1``) and limits are
checked before allocation (``ECP-FRAME-9``). Every failure is a
:class:`~ecp.spec.errors.RemoteProtocolError` subclass naming its clause.

Cost: a well-formed message costs msgspec's decode plus a few length tests
and, where the type has untyped fields, a generated check of those
(:mod:`ecp.spec.limits` says which limit is kept where). Anything msgspec
refuses, and any frame too long for that reasoning, takes the careful path
(:func:`_decode_checked`): a header walk first, then a precise, typed error.
"""

from __future__ import annotations

import contextvars
from typing import Any, Sequence, Union

import msgspec

from .control import CoordinatorPublication, StartDPWave, UtilityRequest
from .enums import (
    AUX_FRAME_THRESHOLD, ENGINE_CORE_DEAD, EXT_CLOUDPICKLE, EXT_PICKLE, EXT_RAW_VIEW, RequestType,
)
from .errors import (
    DecodeError, FrameCountError, HandshakeError, InvalidMessageError, LimitExceeded, LocalProtocolError,
    ProtocolError, UnknownRequestType, UnsafeExtType,
)
from .diagnose import ExtValue, TensorShapeError, find_mismatch, kind
from .handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from .limits import DEFAULT_LIMITS, DecodeLimits, check_frame
from .outputs import EngineCoreOutputs
from .request import EngineCoreRequest
from .tensors import Tensor
from .untyped import depth_check_code, depth_checker, locate_too_deep

Frame = Union[bytes, bytearray, memoryview]


# --------------------------------------------------------------------------- messages
#: An input message as :func:`decode_input` returns it and :func:`encode_input` takes it: the
#: payload itself, whose class names the request type (an ABORT is its list of request ids).
#: No wrapper: on a receiver's hot path a wrapper object per message costs a quarter of what
#: msgspec takes to decode a small one, and the class already says what the type frame said.
InputMessage = Union[EngineCoreRequest, list[str], UtilityRequest, StartDPWave]

_INPUT_CLASSES = {EngineCoreRequest: RequestType.ADD, list: RequestType.ABORT, tuple: RequestType.ABORT,
                  UtilityRequest: RequestType.UTILITY, StartDPWave: RequestType.START_DP_WAVE}


def request_type_of(message: Any) -> RequestType:
    """The request type an input message travels as (its type frame).

    Raises :class:`~ecp.spec.errors.LocalProtocolError` for anything that is not
    an input message.
    """
    try:
        return _INPUT_CLASSES[type(message)]
    except KeyError:
        for cls, rtype in _INPUT_CLASSES.items():
            if isinstance(message, cls):
                return rtype
    raise LocalProtocolError(f"not an input message: {type(message).__name__}", clause="ECP-FRAME-1",
                             expected="EngineCoreRequest, list of request ids, UtilityRequest or StartDPWave",
                             got=type(message).__name__)


class EngineDeadSentinel:
    """The ``ENGINE_CORE_DEAD`` sentinel, as a decoded output message (``ECP-OUT-8``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ENGINE_DEAD"


ENGINE_DEAD = EngineDeadSentinel()


# --------------------------------------------------------------------------- hooks
# The aux frames of the message being encoded or decoded. Encoding and decoding
# are synchronous, so a context variable scoped to one call is enough.
_aux_out: contextvars.ContextVar[list[bytes]] = contextvars.ContextVar("ecp_aux_out")
_frames_in: contextvars.ContextVar[Sequence[Frame]] = contextvars.ContextVar("ecp_frames_in")


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        data = bytes(obj.data)
        if len(data) < AUX_FRAME_THRESHOLD:
            return [obj.dtype, list(obj.shape), msgspec.msgpack.Ext(EXT_RAW_VIEW, data)]
        aux = _aux_out.get()
        aux.append(data)
        return [obj.dtype, list(obj.shape), len(aux)]  # index 0 is the payload frame
    raise LocalProtocolError(
        f"cannot encode a value of type {type(obj).__name__}",
        clause="ECP-FRAME-3", got=type(obj).__name__,
    )


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == EXT_RAW_VIEW:
        return bytes(data)
    name = {EXT_PICKLE: "pickle", EXT_CLOUDPICKLE: "cloudpickle"}.get(code, "unknown")
    raise UnsafeExtType(f"msgpack ext type {code} ({name}) is refused and never decoded", code=code)


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is Tensor:
        if not (isinstance(obj, list) and len(obj) == 3):
            raise TensorShapeError("expected a tensor [dtype, shape, data]",
                                   expected="tensor [dtype, shape, data]", got=kind(obj))
        dtype, shape, data = obj
        if not isinstance(dtype, str) or not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise TensorShapeError("expected a tensor [dtype: str, shape: [int >= 0], data]",
                                   expected="tensor [dtype: str, shape: [int >= 0], data]",
                                   got=f"[{kind(dtype)}, {kind(shape)}, ...]")
        if isinstance(data, int) and not isinstance(data, bool):
            frames = _frames_in.get(None)
            count = 1 if frames is None else len(frames)  # None: the payload is the only frame
            if not 0 <= data < count:
                raise TensorShapeError(f"tensor refers to frame {data}, message has {count} frame(s)",
                                       expected=f"aux frame index 1..{count - 1}", got=str(data))
            if data == 0:
                raise TensorShapeError("tensor data index 0 is the payload itself, not an aux frame",
                                       expected="aux frame index >= 1", got="0")
            data = bytes(frames[data])
        elif not isinstance(data, bytes):
            raise TensorShapeError("tensor data must be ext type 3 or an aux-frame index",
                                   expected="ext type 3 or an aux-frame index", got=kind(data))
        tensor = Tensor(dtype, tuple(shape), data)
        try:
            tensor.check()
        except ValueError as exc:
            raise TensorShapeError(str(exc), expected=f"{tensor.expected_nbytes()} bytes",
                                   got=f"{len(data)} bytes") from None
        return tensor
    raise TypeError(f"unsupported type {typ!r}")


def _schema_hook(typ: type) -> dict[str, Any]:
    if typ is Tensor:
        return {
            "title": "Tensor",
            "description": "[dtype, shape, data]: data is msgpack ext type 3 (raw little-endian bytes) "
                           "or an int index into the multipart message (1 = first aux frame). "
                           "In JSON golden vectors the bytes are base64.",
            "type": "array",
            "prefixItems": [
                {"type": "string"},
                {"type": "array", "items": {"type": "integer", "minimum": 0}},
                {"anyOf": [{"type": "string", "contentEncoding": "base64"},
                           {"type": "integer", "minimum": 1}]},
            ],
            "minItems": 3, "maxItems": 3,
        }
    raise NotImplementedError(typ)


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_PLAIN_ENCODER = msgspec.msgpack.Encoder()


def _decoder(typ: Any) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(typ, dec_hook=_dec_hook, ext_hook=_ext_hook)


_DEC_REQUEST = _decoder(EngineCoreRequest)
_DEC_ABORT = _decoder(list[str])
_DEC_UTILITY = _decoder(UtilityRequest)
_DEC_WAVE = _decoder(StartDPWave)
_DEC_OUTPUTS = _decoder(EngineCoreOutputs)
_DEC_HANDSHAKE = _decoder(Union[Hello, Ready])
_DEC_INIT = _decoder(EngineHandshakeMetadata)
_DEC_READY_RESPONSE = _decoder(EngineCoreReadyResponse)
_DEC_COORDINATOR_PUBLICATION = _decoder(CoordinatorPublication)
_DEC_ANY = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def _diagnostic_ext_hook(code: int, data: memoryview) -> Any:
    return ExtValue(code, data if code == EXT_RAW_VIEW else b"")  # a refused ext's body is never read


# The error path re-reads a refused payload untyped, turning every ext into a marker.
_DEC_DIAGNOSTIC = msgspec.msgpack.Decoder(ext_hook=_diagnostic_ext_hook)

# decoder -> depth checker of its untyped positions (None: the type has none)
_CHECKS: dict[msgspec.msgpack.Decoder, Any] = {}


def _checker(decoder: msgspec.msgpack.Decoder) -> Any:
    try:
        return _CHECKS[decoder]
    except KeyError:
        check = _CHECKS[decoder] = depth_checker(decoder.type)
        return check


for _d in (_DEC_REQUEST, _DEC_ABORT, _DEC_UTILITY, _DEC_WAVE, _DEC_OUTPUTS, _DEC_HANDSHAKE, _DEC_INIT,
           _DEC_READY_RESPONSE, _DEC_COORDINATOR_PUBLICATION, _DEC_ANY):
    _checker(_d)


# --------------------------------------------------------------------------- hot paths
# The public decoders' fast paths are generated: each inlines the depth check of its
# message type's untyped values (ecp.spec.untyped) where a template says ``# check: NAME``,
# because on a message of a few hundred ns a call to a checker costs as much as its
# tests. The templates below are the code; only those lines are filled in.
def _compile_hot_path(name: str, template: str, checks: dict[str, tuple[Any, str]],
                      namespace: dict[str, Any] | None = None) -> Any:
    """Compile ``template`` (which defines ``name``) in ``namespace`` (default: this module's
    globals), each ``# check: KEY`` line replaced by the depth check of ``checks[KEY] =
    (type, statement run when too deep)`` at that line's indentation. A release profile
    (:mod:`ecp.spec.profile`) compiles the same templates over its own decoders."""
    ns = globals() if namespace is None else namespace
    lines = []
    for line in template.splitlines():
        key = line.strip().removeprefix("# check: ") if line.strip().startswith("# check: ") else None
        if key is None:
            lines.append(line)
            continue
        typ, fail = checks[key]
        indent = (len(line) - len(line.lstrip())) // 4
        code = depth_check_code(typ, "message", fail, indent, prefix=f"_u_{name}_{key}_")
        if code is None:
            lines.append("    " * indent + "pass")
            continue
        body, constants = code
        lines.extend(body)
        ns.update(constants)  # (prefixed: no clash with this module's names)
    exec(compile("\n".join(lines), f"<ecp.spec.codec hot path {name}>", "exec"), ns)
    return ns[name]


# --------------------------------------------------------------------------- core helpers
def encode_payload(obj: Any) -> list[bytes]:
    """Encode one msgpack document; return ``[payload, *aux]`` (tensors ≥ 256 B in aux)."""
    aux: list[bytes] = []
    token = _aux_out.set(aux)
    try:
        payload = _ENCODER.encode(obj)
    except ProtocolError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {type(obj).__name__}: {exc}", clause="ECP-FRAME-3") from exc
    finally:
        _aux_out.reset(token)
    return [payload, *aux]


_FAILED = object()


def decode_payload(decoder: msgspec.msgpack.Decoder, frames: Sequence[Frame], *, payload_index: int,
                   clause: str, limits: DecodeLimits = DEFAULT_LIMITS, frame_offset: int = 0) -> Any:
    """Decode ``frames[payload_index]`` with ``decoder``, aux frames after it.

    ``frame_offset`` is added to reported frame indexes (the position of
    ``frames[0]`` in the message as the transport saw it). The frame count is
    the caller's to check.
    """
    payload = frames[payload_index]
    n = len(payload)
    if n <= limits._walk_free:
        # The common case: msgspec alone keeps every limit (see ecp.spec.limits).
        aux = frames[payload_index + 1:]
        if all(len(frame) <= limits.max_frame_bytes for frame in aux):
            token = _frames_in.set(frames[payload_index:]) if aux else None
            try:
                out = decoder.decode(payload)
            except Exception:  # diagnosed, precisely, on the careful path
                out = _FAILED
            finally:
                if token is not None:
                    _frames_in.reset(token)
            if out is not _FAILED:
                check = _checker(decoder)
                if check is None or n <= limits._depth_free or not check(out, limits.max_depth):
                    return out
                raise _too_deep(decoder, out, limits, payload_index + frame_offset)
    return _decode_checked(decoder, frames, payload_index, clause, limits, frame_offset)


def _decode_checked(decoder: msgspec.msgpack.Decoder, frames: Sequence[Frame], payload_index: int,
                    clause: str, limits: DecodeLimits, frame_offset: int) -> Any:
    """The careful path: every limit checked on the wire first, every failure typed.

    Taken for frames too long for the fast path and for every frame the fast
    path refused, so a refused frame is reported as the limit it breaks, else
    as msgspec found it, with field path / expected / got from the type.
    """
    index = payload_index + frame_offset
    payload = frames[payload_index]
    try:
        check_frame(payload, limits, frame_index=index)
    except LimitExceeded:
        raise
    except DecodeError:
        pass  # malformed: msgspec reports it below, in its own terms (it never over-allocates)
    for i in range(payload_index + 1, len(frames)):
        if len(frames[i]) > limits.max_frame_bytes:
            check_frame(frames[i], limits, frame_index=i + frame_offset)
    token = _frames_in.set(frames[payload_index:])
    try:
        out = decoder.decode(payload)
    except ProtocolError as exc:
        if exc.frame_index is None:
            raise exc.replace(frame_index=index) from None
        raise
    except msgspec.ValidationError as exc:
        raise _validation_error(decoder, payload, exc, clause, index) from None
    except msgspec.DecodeError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ProtocolError):
            raise cause.replace(frame_index=index) from None
        raise DecodeError(f"malformed msgpack: {exc}", clause="ECP-FRAME-9", frame_index=index,
                          got=str(exc)) from None
    except RecursionError:
        raise LimitExceeded("nesting too deep to decode", clause="ECP-FRAME-9", frame_index=index,
                            expected=f"<= {limits.max_depth} levels") from None
    except UnicodeDecodeError as exc:  # msgspec lets invalid UTF-8 in a str escape as is
        raise DecodeError(f"invalid UTF-8 in a msgpack string: {exc.reason} at byte {exc.start}",
                          clause="ECP-FRAME-9", frame_index=index,
                          expected="UTF-8 text", got=exc.object[exc.start:exc.start + 4].hex()) from None
    except (ValueError, TypeError, OverflowError) as exc:  # anything else a hook or msgspec lets out
        raise DecodeError(f"undecodable payload: {exc}", clause=clause, frame_index=index,
                          got=type(exc).__name__) from None
    finally:
        _frames_in.reset(token)
    check = _checker(decoder)
    if check is not None and check(out, limits.max_depth):
        raise _too_deep(decoder, out, limits, index)
    return out


def _too_deep(decoder: msgspec.msgpack.Decoder, out: Any, limits: DecodeLimits, index: int) -> LimitExceeded:
    """The error for a decoded payload whose untyped part nests deeper than ``max_depth``."""
    return LimitExceeded(f"nesting deeper than {limits.max_depth} levels", clause="ECP-FRAME-9",
                         frame_index=index, field_path=locate_too_deep(decoder.type, out, limits.max_depth),
                         expected=f"<= {limits.max_depth} levels", got=f"> {limits.max_depth}")


def _split_msgspec_message(exc: Exception) -> tuple[str, str | None]:
    """msgspec's sentence without the ``- at `$…``` suffix, and the path in it, if any.
    The path is used only where the type table finds no mismatch (a failure raised
    by a hook); ``expected``/``got`` never come from the sentence."""
    text = str(exc)
    head, sep, tail = text.rpartition(" - at `")
    if not sep or not tail.endswith("`"):
        return text, None
    path = tail[:-1]
    if "` in `" in path:  # "`key` in `$[2]`": a dict key
        path = path.rpartition("` in `")[2]
    return head, path


def _validation_error(decoder: msgspec.msgpack.Decoder, payload: Frame, exc: msgspec.ValidationError,
                      clause: str, index: int) -> ProtocolError:
    """The typed error for a payload msgspec refused as not matching ``decoder.type``."""
    cause = exc.__cause__ or exc.__context__
    message, path = _split_msgspec_message(exc)
    if isinstance(cause, InvalidMessageError):  # the type's own invariant: the peer broke it
        return DecodeError(cause.message, clause=cause.clause, frame_index=index, field_path=path or "$",
                           expected=cause.expected, got=cause.got)
    if isinstance(cause, ProtocolError):  # raised inside a hook: re-raised where it was found
        return cause.replace(frame_index=index, field_path=cause.field_path or path)
    try:
        mismatch = find_mismatch(decoder.type, _DEC_DIAGNOSTIC.decode(payload), _dec_hook)
    except Exception:  # noqa: BLE001 - e.g. a map used as a map key; then msgspec's path is all we have
        mismatch = None
    if mismatch is not None and mismatch.got.startswith("ext ") and mismatch.got != f"ext {EXT_RAW_VIEW}":
        code = int(mismatch.got[4:])
        name = {EXT_PICKLE: "pickle", EXT_CLOUDPICKLE: "cloudpickle"}.get(code, "unknown")
        return UnsafeExtType(f"msgpack ext type {code} ({name}) is refused and never decoded", code=code,
                             frame_index=index, field_path=mismatch.path)
    if mismatch is not None:
        return DecodeError(message, clause=clause, frame_index=index, field_path=mismatch.path,
                           expected=mismatch.expected, got=mismatch.got)
    expected = got = None
    if isinstance(cause, TensorShapeError):
        expected, got = cause.expected, cause.got
    return DecodeError(message, clause=clause, frame_index=index, field_path=path or "$",
                       expected=expected, got=got)


def _check_frame_count(frames: Sequence[Frame], minimum: int, limits: DecodeLimits, what: str,
                       clause: str) -> None:
    if len(frames) < minimum:
        raise FrameCountError(f"{what} needs at least {minimum} frame(s), got {len(frames)}",
                              clause=clause, expected=f">= {minimum} frames", got=len(frames))
    if len(frames) > limits.max_frames:
        raise LimitExceeded(f"{what} has {len(frames)} frames, limit is {limits.max_frames}",
                            clause="ECP-FRAME-9", expected=f"<= {limits.max_frames} frames",
                            got=len(frames))


# --------------------------------------------------------------------------- input side
_PLAIN_ENCODE = _PLAIN_ENCODER.encode
_ENCODE_FAILURES = (TypeError, ValueError, OverflowError)
_ADD, _ABORT, _UTILITY, _WAVE = (t.value for t in (RequestType.ADD, RequestType.ABORT, RequestType.UTILITY,
                                                   RequestType.START_DP_WAVE))


def encode_input(msg: InputMessage) -> list[bytes]:
    """Frames for an engine's input DEALER: ``[type, payload, *aux]`` (no identity).

    ``msg`` is the payload; its class picks the request type (:func:`request_type_of`).
    """
    cls = msg.__class__  # (measurably cheaper than type(msg) here)
    try:  # the common case, no tensor inside: msgspec alone (a tensor makes this encoder refuse)
        # smallest messages first: a test weighs most on them (a dict lookup costs more than two)
        if cls is list:
            return [_ABORT, _PLAIN_ENCODE(msg)]
        if cls is UtilityRequest:
            return [_UTILITY, _PLAIN_ENCODE(msg)]
        if cls is EngineCoreRequest:
            return [_ADD, _PLAIN_ENCODE(msg)]
        if cls is StartDPWave:
            return [_WAVE, _PLAIN_ENCODE(msg)]
    except _ENCODE_FAILURES:
        pass
    rtype = request_type_of(msg)
    if rtype is RequestType.ABORT:
        msg = list(msg)
    return [rtype.value, *encode_payload(msg)]


def encode_add(request: EngineCoreRequest) -> list[bytes]:
    return encode_input(request)


def encode_abort(request_ids: Sequence[str]) -> list[bytes]:
    return encode_input(list(request_ids))


def encode_utility(client_index: int, call_id: int, method_name: str, args: Sequence[Any] = ()) -> list[bytes]:
    if not 0 <= call_id < 2**64:
        raise LocalProtocolError(f"call id {call_id} is not a u64", clause="ECP-UTIL-1",
                                 expected="0 <= call_id < 2**64", got=call_id)
    return encode_input(UtilityRequest(client_index, call_id, method_name, list(args)))


def encode_start_dp_wave(new_wave: int, exclude_eng_index: int | None = None) -> list[bytes]:
    return encode_input(StartDPWave(new_wave, exclude_eng_index))


_INPUT_DECODERS = {
    RequestType.ADD: (_DEC_REQUEST, "ECP-REQ-1"),
    RequestType.ABORT: (_DEC_ABORT, "ECP-ABORT-1"),
    RequestType.UTILITY: (_DEC_UTILITY, "ECP-UTIL-1"),
    RequestType.START_DP_WAVE: (_DEC_WAVE, "ECP-DP-4"),
}
# type frame -> msgspec's decode, for two-frame messages
_INPUT_FAST = {rtype.value: dec.decode for rtype, (dec, _) in _INPUT_DECODERS.items()}
# (the same bound-method objects: the hot path tells them apart by identity)
_DECODE_REQUEST, _DECODE_UTILITY = _INPUT_FAST[RequestType.ADD.value], _INPUT_FAST[RequestType.UTILITY.value]
assert _checker(_DEC_ABORT) is None and _checker(_DEC_WAVE) is None  # (no branch for them below)

# Hot path: a well-formed two-frame message no longer than the limits need a walk for
# (see decode_payload); every name and test in it is measurable on a 100 ns message.
_DECODE_INPUT = '''
def decode_input(frames: Sequence[Frame], limits: DecodeLimits = DEFAULT_LIMITS,
                 frame_offset: int = 0) -> InputMessage:
    """Decode the frames an engine DEALER received: ``[type, payload, *aux]``.

    Returns the payload, typed by the type frame: an :class:`EngineCoreRequest`
    (ADD), a ``list[str]`` of request ids (ABORT), a :class:`UtilityRequest`
    (UTILITY) or a :class:`StartDPWave` (START_DP_WAVE). Raises
    :class:`FrameCountError`, :class:`UnknownRequestType`,
    :class:`DecodeError` (and subclasses); never anything else.
    """
    try:
        type_frame, payload = frames  # anything but two frames takes the careful path
        decode = _INPUT_FAST[type_frame]
    except (ValueError, KeyError, TypeError):
        pass
    else:
        n = len(payload)
        if n <= limits._depth_free:  # too short to nest past the limit: msgspec alone
            try:
                return decode(payload)
            except Exception:  # diagnosed, precisely, on the careful path
                pass
        elif n <= limits._walk_free:
            try:
                message = decode(payload)
            except Exception:
                pass
            else:
                limit = limits.max_depth
                if decode is _DECODE_REQUEST:
                    # check: request
                elif decode is _DECODE_UTILITY:
                    # check: utility
                return message
    return _decode_input_careful(frames, limits, frame_offset)
'''
decode_input = _compile_hot_path("decode_input", _DECODE_INPUT, {
    "request": (EngineCoreRequest, "raise _too_deep(_DEC_REQUEST, message, limits, 1 + frame_offset)"),
    "utility": (UtilityRequest, "raise _too_deep(_DEC_UTILITY, message, limits, 1 + frame_offset)"),
})


#: type frame -> (decoder, clause, name) of every input type on the wire
InputTable = dict[bytes, tuple[msgspec.msgpack.Decoder, str, str]]
_INPUT_TABLE: InputTable = {rtype.value: (dec, clause, rtype.name) for rtype, (dec, clause) in _INPUT_DECODERS.items()}


def _decode_input_careful(frames: Sequence[Frame], limits: DecodeLimits, frame_offset: int,
                          table: InputTable = _INPUT_TABLE) -> InputMessage:
    _check_frame_count(frames, 2, limits, "an input message", "ECP-FRAME-1")
    type_frame = bytes(frames[0])
    entry = table.get(type_frame)
    if entry is None:
        known = sorted(table)
        raise UnknownRequestType(
            f"request type frame {type_frame.hex() or '(empty)'} is not "
            + "/".join(table[b][2] for b in known),
            clause="ECP-FRAME-1", frame_index=frame_offset,
            expected=f"one byte {known[0].hex()}..{known[-1].hex()}", got=type_frame[:8].hex(),
        )
    decoder, clause, name = entry
    if name != "ADD" and len(frames) != 2:
        raise FrameCountError(f"{name} carries exactly 2 frames, got {len(frames)}",
                              clause="ECP-FRAME-1", expected="2 frames", got=len(frames))
    return decode_payload(decoder, frames, payload_index=1, clause=clause, limits=limits,
                          frame_offset=frame_offset)


# --------------------------------------------------------------------------- output side
def encode_outputs(outputs: EngineCoreOutputs) -> list[bytes]:
    """Frames for an engine's output PUSH: ``[payload, *aux]``."""
    try:  # no tensor inside: msgspec alone (a tensor makes the plain encoder refuse)
        return [_PLAIN_ENCODE(outputs)]
    except _ENCODE_FAILURES:
        return encode_payload(outputs)


def encode_engine_dead() -> list[bytes]:
    """The single raw ``ENGINE_CORE_DEAD`` frame."""
    return [ENGINE_CORE_DEAD]


_DECODE_OUTPUTS = _DEC_OUTPUTS.decode

# Hot path, as decode_input's. The sentinel frame never decodes as EngineCoreOutputs,
# so it is left to the careful path.
_DECODE_OUTPUTS_SOURCE = '''
def decode_outputs(frames: Sequence[Frame], limits: DecodeLimits = DEFAULT_LIMITS
                   ) -> EngineCoreOutputs | EngineDeadSentinel:
    """Decode the frames a frontend PULL received: ``EngineCoreOutputs``, or
    :data:`ENGINE_DEAD` for the ``ENGINE_CORE_DEAD`` sentinel (``ECP-OUT-8``)."""
    try:
        (payload,) = frames  # aux frames take the careful path
    except (ValueError, TypeError):
        pass
    else:
        n = len(payload)
        if n <= limits._depth_free:
            try:
                return _DECODE_OUTPUTS(payload)
            except Exception:
                pass
        elif n <= limits._walk_free:
            try:
                message = _DECODE_OUTPUTS(payload)
            except Exception:
                pass
            else:
                limit = limits.max_depth
                # check: outputs
                return message
    return _decode_outputs_careful(frames, limits)
'''
decode_outputs = _compile_hot_path("decode_outputs", _DECODE_OUTPUTS_SOURCE, {
    "outputs": (EngineCoreOutputs, "raise _too_deep(_DEC_OUTPUTS, message, limits, 0)"),
})


def _decode_outputs_careful(frames: Sequence[Frame], limits: DecodeLimits,
                            decoder: msgspec.msgpack.Decoder = _DEC_OUTPUTS) -> EngineCoreOutputs | EngineDeadSentinel:
    _check_frame_count(frames, 1, limits, "an output message", "ECP-FRAME-2")
    if len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD:
        return ENGINE_DEAD
    return decode_payload(decoder, frames, payload_index=0, clause="ECP-FRAME-2", limits=limits)


# --------------------------------------------------------------------------- handshake
# One handshake frame (HELLO, READY, INIT or the ready payload): msgspec's own
# encoder method, as is (a wrapper would only add a call).
encode_handshake = _PLAIN_ENCODE


def _decode_single(decoder: msgspec.msgpack.Decoder, frame: Frame, clause: str,
                   limits: DecodeLimits) -> Any:
    """The careful path of the one-frame handshake decoders; errors as :class:`HandshakeError`."""
    try:
        return _decode_checked(decoder, [frame], 0, clause, limits, 0)
    except DecodeError as exc:
        raise HandshakeError(exc.message, clause=exc.clause, frame_index=exc.frame_index,
                             field_path=exc.field_path, expected=exc.expected, got=exc.got) from None


# The handshake decoders try msgspec alone first, inline, like decode_outputs.
_DECODE_HANDSHAKE = _DEC_HANDSHAKE.decode
_DECODE_INIT = _DEC_INIT.decode
_DECODE_READY_RESPONSE = _DEC_READY_RESPONSE.decode
assert _checker(_DEC_HANDSHAKE) is None and _checker(_DEC_INIT) is None  # no untyped field


def decode_handshake(frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Hello | Ready:
    """Decode an engine → frontend handshake frame (HELLO or READY by ``status``)."""
    if len(frame) <= limits._walk_free:
        try:
            return _DECODE_HANDSHAKE(frame)
        except Exception:
            pass
    return _decode_single(_DEC_HANDSHAKE, frame, "ECP-HS-7", limits)


def decode_init(frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> EngineHandshakeMetadata:
    """Decode INIT; its address lists must be equal and non-empty, its coordinator
    addresses both present or both absent (``ECP-HS-2``, kept by the type itself)."""
    if len(frame) <= limits._walk_free:
        try:
            return _DECODE_INIT(frame)
        except Exception:
            pass
    return _decode_single(_DEC_INIT, frame, "ECP-HS-2", limits)


_DECODE_READY_RESPONSE_SOURCE = '''
def decode_ready_response(frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS
                          ) -> EngineCoreReadyResponse | None:
    """Decode a ready payload; an empty frame decodes to ``None`` (``ECP-HS-12``)."""
    n = len(frame)
    if n <= limits._depth_free:
        try:
            return _DECODE_READY_RESPONSE(frame)
        except Exception:  # an empty frame too (rare: tested only here, off the hot path)
            pass
    elif n <= limits._walk_free:
        try:
            message = _DECODE_READY_RESPONSE(frame)
        except Exception:
            pass
        else:
            limit = limits.max_depth
            # check: ready
            return message
    if n == 0:
        return None
    return _decode_single(_DEC_READY_RESPONSE, frame, "ECP-HS-4", limits)
'''
decode_ready_response = _compile_hot_path("decode_ready_response", _DECODE_READY_RESPONSE_SOURCE, {
    "ready": (EngineCoreReadyResponse, "raise _too_deep(_DEC_READY_RESPONSE, message, limits, 0)"),
})


def decode_coordinator_publication(frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS
                                   ) -> CoordinatorPublication:
    """Decode a coordinator -> frontend publication ``(counts, wave, running)`` (``ECP-DP-5``),
    one frame on the frontend's XSUB (the subscribe frame ``01`` is not a publication)."""
    return decode_payload(_DEC_COORDINATOR_PUBLICATION, [frame], payload_index=0, clause="ECP-DP-5",
                          limits=limits)


def decode_any(frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decode one frame as plain msgpack (ext 3 → bytes; ext 1/2 refused)."""
    return decode_payload(_DEC_ANY, [frame], payload_index=0, clause="ECP-FRAME-9", limits=limits)


def to_builtins(obj: Any) -> Any:
    """A JSON-friendly view of a typed message (tensor bytes → base64, sets → lists)."""
    def hook(o: Any) -> Any:
        if isinstance(o, Tensor):
            import base64

            return [o.dtype, list(o.shape), base64.b64encode(o.data).decode()]
        raise TypeError(f"cannot convert {type(o).__name__}")

    return msgspec.to_builtins(obj, enc_hook=hook)
