"""Engine-role encoding cases: output framing, full-length arrays, finish reasons, ERROR outputs,
request ids kept verbatim, and the startup utilities a Python frontend sends."""

import math
import struct
import time

import msgspec

from ecp.conformance.engine.raw_outputs import short_array, tensor_placement
from ecp.conformance.engine.cases._common import (abort_fenced, check_aborted, feature_missing, goes_quiet, ok_value,
                                                  paused, require_feature, start_long)
from ecp.conformance import capabilities
from ecp.conformance.outcomes import CaseFailure, Unsupported
from ecp.conformance.registry import case
from ecp.spec import FinishReason, decode_any, wireforms
from ecp.spec.golden import load_documents
from ecp.spec.profile import shipped_profile
from ecp.spec.tensors import DTYPE_ITEMSIZE



def _request_and_reply(fe, tag: str) -> int:
    """Run a 2-token request and an is_sleeping call; return where this case's raw outputs begin."""
    mark = len(fe.raw_outputs)
    rid = fe.new_id(tag)
    fe.add(fe.request(rid, max_tokens=2))
    fe.wait_finished(rid, max_tokens=2)
    ok_value(fe.call("is_sleeping"), "is_sleeping")
    fe.observe()
    return mark


@case("ENG-HS-7")
def test_startup_utilities(engine):
    fe = engine
    value = ok_value(fe.call("reset_mm_cache", []), "reset_mm_cache")
    if value is not None:
        raise CaseFailure(f"reset_mm_cache [] returned {value!r}; its result is nil")
    tasks = ok_value(fe.call("get_supported_tasks", []), "get_supported_tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise CaseFailure(f"get_supported_tasks [] returned {tasks!r}; expected an array of strings")
    if "generate" not in tasks:
        raise CaseFailure(f"get_supported_tasks [] returned {tasks!r} without \"generate\": a Python frontend "
                        "mounts no completion routes for this engine")


@case("ENG-OUT-5")
def test_output_framing(engine):
    fe = engine
    mark = _request_and_reply(fe, "framing")
    for client, frames in fe.raw_outputs[mark:]:
        try:
            fe.codec.decode_outputs(frames)
        except Exception as exc:  # noqa: BLE001 - any failure to decode is the finding
            raise CaseFailure(f"an output message on output[{client}] ({len(frames)} frame(s)) is not "
                            f"[EngineCoreOutputs payload, *aux]: {exc}") from None


@case("ENG-OUT-6")
def test_full_length_arrays(engine):
    fe = engine
    mark = _request_and_reply(fe, "arrays")
    for client, frames in fe.raw_outputs[mark:]:
        problem = short_array(frames, fe.profile)
        if problem is not None:
            raise CaseFailure(f"output[{client}]: {problem}")


def _paused_error(fe, engines, tag: str):
    """The terminal output of an ADD sent while the scheduler is paused: the one ERROR output every
    engine can be driven to produce (``ECP-REQ-7``) without input a vLLM engine core cannot survive."""
    with paused(fe, engines):
        rid = fe.new_id(tag)
        fe.add(fe.request(rid, max_tokens=2))
        return rid, fe.wait_finished(rid)


@case("ENG-OUT-7")
def test_finish_reason_codes(engine, engines):
    fe = engine
    rid = fe.new_id("reason-length")
    fe.add(fe.request(rid, max_tokens=2))
    term = fe.wait_finished(rid, max_tokens=2)
    _check_reason("max_tokens reached", term.output.finish_reason, FinishReason.LENGTH)
    # the one ERROR output every engine can be driven to: an ADD refused by a user pause (0.33)
    capabilities.require_release(fe.profile, utility="pause_generation", field="EngineCoreOutput.error")
    _, err = _paused_error(fe, engines, "reason-error")
    _check_reason("an ADD refused while paused", err.output.finish_reason, FinishReason.ERROR)


def _check_reason(what: str, got, want: FinishReason) -> None:
    if got != want or int(got) != int(want):
        raise CaseFailure(f"{what}: finish_reason {got!r}, expected {want.name} ({int(want)})")


@case("ENG-OUT-8")
def test_error_output_shape(engine, engines):
    fe = engine
    capabilities.require_release(fe.profile, utility="pause_generation", field="EngineCoreOutput.error")
    rid, term = _paused_error(fe, engines, "error-shape")
    out = term.output
    if out.finish_reason != FinishReason.ERROR:
        raise CaseFailure(f"an ADD while paused ended with {out.finish_reason!r}, expected ERROR", clause="ECP-REQ-7")
    e = out.error
    if e is None or not isinstance(e.code, str) or not e.code or not isinstance(e.message, str) \
            or not isinstance(e.retryable, bool):
        raise CaseFailure(f"the ERROR output carries error={e!r}; expected {{code: str, message: str, retryable: bool}}")
    if not term.finished_requests or rid not in term.finished_requests:
        raise CaseFailure(f"the ERROR output's message lists finished_requests={term.finished_requests!r}, "
                        f"without {rid!r}")


#: ids a frontend may send: long, non-ASCII, digits only, with separators (``ECP-FRAME-10``)
ODD_IDS = ("ecp-" + "x" * 200, "ecp-idé-日本-✓", "0123456789", "cmpl-ecp-a/b:c d")


@case("ENG-REQ-8")
def test_request_ids_verbatim(engine):
    fe = engine
    for rid in ODD_IDS:
        fe.add(fe.request(rid, max_tokens=2))
    # an output for an id that was never sent is how a mangled id shows
    fe.wait(lambda: all(fe.terminals(r) for r in ODD_IDS) or bool(set(fe.by_request) - set(_sent(fe))), 5.0,
            f"terminal outputs for {len(ODD_IDS)} requests with unusual ids")
    stray = sorted(set(fe.by_request) - set(_sent(fe)))
    if stray:
        raise CaseFailure(f"outputs carry request id(s) {stray} that were never sent; ids must come back verbatim")
    # ABORT carries the same id the ADD used: it must stop that request
    [(long, n)] = start_long(fe, "abort-" + "é" * 40)
    fence = abort_fenced(fe, [long])
    if goes_quiet(fe, [long], time.monotonic()):
        raise CaseFailure(f"ABORT with the ADD's own id {long!r} did not stop the request")
    check_aborted(fe, long, n, fence)


def _sent(fe) -> list[str]:
    return [rid for ids in fe.added.values() for rid in ids]


# ------------------------------------------------------------------ tolerant receivers
def _required_fields(fe) -> int:
    """How many leading fields of the release's EngineCoreRequest have no default (0.33: request_id ..
    data_parallel_rank): the shortest ADD a receiver must serve."""
    fields = fe.profile.layout.messages["EngineCoreRequest"].fields
    return next((i for i, f in enumerate(fields) if not f.required), len(fields))


def _add_array(fe, rid: str, max_tokens: int) -> list:
    """The ADD payload of a plain request as a plain msgpack array, to be reshaped by a case."""
    return decode_any(fe.codec.encode_add(fe.request(rid, max_tokens=max_tokens))[1])


def _send_add_payload(fe, rid: str, payload: bytes) -> None:
    fe.send_raw([b"\x00", payload])
    fe.added.setdefault(0, []).append(rid)


def _float32(payload: bytes, sentinel: float, value: float) -> bytes:
    """Re-encode the float64 ``sentinel`` in ``payload`` as a msgpack float32 holding ``value``."""
    f64 = b"\xcb" + struct.pack(">d", sentinel)
    assert payload.count(f64) == 1, "sentinel float must occur once"
    return payload.replace(f64, b"\xca" + struct.pack(">f", value))


def _served(fe, rid: str, what: str, max_tokens: int, exact: bool = True) -> None:
    term = fe.wait_finished(rid)
    out = term.output
    if out.finish_reason == FinishReason.ERROR:
        raise CaseFailure(f"{what} was refused: {out.error!r}")
    got = len(fe.tokens(rid))
    if exact and (out.finish_reason != FinishReason.LENGTH or got != max_tokens):
        raise CaseFailure(f"{what} ended with {out.finish_reason!r} after {got} token(s), expected LENGTH after "
                        f"{max_tokens}: its fields were not read as sent")


@case("ENG-REQ-10")
def test_tolerant_add_arrays(engine):
    fe = engine
    short = fe.new_id("short-add")
    required = _required_fields(fe)
    # every field it drops holds its default, so the receiver must read it as it was sent
    request = msgspec.structs.replace(fe.request(short, max_tokens=3), external_req_id=None)
    add = decode_any(fe.codec.encode_add(request)[1])
    fields = fe.profile.layout.messages["EngineCoreRequest"].fields
    dropped = [f.name for f, v in zip(fields[required:], add[required:])
               if v != (None if f.default is msgspec.UNSET else f.default)]
    if dropped:
        raise AssertionError(f"harness: the short ADD would drop non-default fields {dropped}")
    _send_add_payload(fe, short, msgspec.msgpack.encode(add[:required]))
    _served(fe, short, f"an ADD cut to its {required} required fields ({fe.profile.label})", 3)
    long = fe.new_id("long-add")
    add = _add_array(fe, long, 3)
    _send_add_payload(fe, long, msgspec.msgpack.encode([*add, "ecp-future-field", {"x": [1]}]))
    _served(fe, long, f"an ADD with {len(add) + 2} elements (2 unknown trailing ones)", 3)


@case("ENG-REQ-11")
def test_tolerant_scalars(engine):
    fe = engine
    rid = fe.new_id("scalars")
    add = _add_array(fe, rid, 3)
    sp = add[3]
    sp["temperature"] = 0  # an int where a float is declared
    sp["top_p"] = 0.123456789  # becomes a float32
    sp["_all_stop_token_ids"] = []  # an array where a set is declared
    _send_add_payload(fe, rid, _float32(msgspec.msgpack.encode(add), 0.123456789, 1.0))
    _served(fe, rid, "an ADD with temperature as an int, top_p as float32 and a set as an array", 3)
    # ECP-FRAME-11: the same value in other wire forms (what an encoder in another language may write)
    rid = fe.new_id("wire-forms")
    add = _add_array(fe, rid, 3)
    add[5] = float(int(add[5]))  # an integral arrival_time, written below as an int
    tree = wireforms.parse(msgspec.msgpack.encode(add))
    payload = wireforms.write(tree, ints="int64", headers="widest", floats="float32",
                              int_for_float=lambda path: path == (5,))
    _send_add_payload(fe, rid, payload)
    _served(fe, rid, "an ADD with every int as int64 (d3), every header at its widest (dd/df/db), float32 floats "
            "and an integral arrival_time as an int", 3)


@case("ENG-REQ-12")
def test_sampling_params_map(engine):
    fe = engine
    rid = fe.new_id("sp-map")
    add = _add_array(fe, rid, 4)
    # only what differs from the defaults, one key present with its default value, and an unknown key
    add[3] = {"max_tokens": 4, "ignore_eos": True, "temperature": 0.0, "output_kind": add[3].get("output_kind", 1),
              "n": 1, "ecp_future_option": {"nested": [1, 2]}}
    _send_add_payload(fe, rid, msgspec.msgpack.encode(add))
    _served(fe, rid, "an ADD whose SamplingParams map omits defaults and carries an unknown key", 4)


def _vllm_rs_add(fe, rid: str) -> tuple[bytes, str]:
    """The ADD payload vllm-rs sent in the recorded traffic (fixmap, float32 sampling floats),
    with its request id replaced by one of the same length. UNSUPPORTED when the release under test
    reads that ADD otherwise than the release it was recorded from (an element moved or retyped)."""
    document = load_documents()["traffic-vllm-rs-to-engine.json"]
    [vector] = [v for v in document["vectors"] if v["kind"] == "add"]
    _same_add_shape(fe, shipped_profile(document["vllm_version"]), vector["value"])
    payload = bytes.fromhex(vector["frames"][1])
    old: str = vector["value"][0]
    new = rid[:len(old)].ljust(len(old), "0")
    assert len(new.encode()) == len(old.encode()), "harness: the replacement id must keep the encoding's length"
    return payload.replace(msgspec.msgpack.encode(old), msgspec.msgpack.encode(new), 1), new


def _same_add_shape(fe, recorded, value: list) -> None:
    """Raise Unsupported unless the release under test has the recorded release's EngineCoreRequest
    elements in the same places with the same types (trailing ones it adds are defaulted), and the
    same types for the SamplingParams keys the recording carries."""
    mine, theirs = fe.profile.layout.messages, recorded.layout.messages
    ours = mine["EngineCoreRequest"].fields
    for f in theirs["EngineCoreRequest"].fields:
        if f.index >= len(ours) or (ours[f.index].name, ours[f.index].type) != (f.name, f.type):
            raise Unsupported(f"the vllm-rs ADD was recorded from {recorded.label}; element {f.index} of "
                              f"EngineCoreRequest is {f.name} ({f.type}) there, "
                              f"{_describe(ours, f.index)} in {fe.profile.label}")
    sp_at = theirs["EngineCoreRequest"].field("sampling_params").index
    sp = value[sp_at] if isinstance(value[sp_at], dict) else {}
    for key in sp:
        there, here = theirs["SamplingParams"].field(key), mine["SamplingParams"].field(key)
        if there is not None and here is not None and there.type != here.type:
            raise Unsupported(f"the vllm-rs ADD was recorded from {recorded.label}; SamplingParams.{key} is "
                              f"{there.type} there, {here.type} in {fe.profile.label}")


def _describe(fields, index: int) -> str:
    return f"{fields[index].name} ({fields[index].type})" if index < len(fields) else "absent"


@case("ENG-REQ-13")
def test_rust_frontend_add(engine):
    fe = engine
    payload, rid = _vllm_rs_add(fe, fe.new_id("rs"))
    _send_add_payload(fe, rid, payload)
    # the recorded request samples up to 3 tokens and may stop at its EOS token
    _served(fe, rid, "the ADD exactly as vllm-rs encodes it (fixmap, float32 sampling floats)", 3, exact=False)
    if len(fe.tokens(rid)) > 3:
        raise CaseFailure(f"the vllm-rs ADD (max_tokens 3) produced {len(fe.tokens(rid))} tokens")
    fe.serves(after="an ADD in vllm-rs encoding")


# ------------------------------------------------------------------ tensors
#: alternatives per sampled token: the token-id and logprob rows (65 x 4 bytes) cross the threshold,
#: the rank tensor (8 bytes per token) stays below it
LOGPROBS = 64


def _logprob_tensors(fe, tag: str) -> list[tuple[str, list, list[bytes]]]:
    """Ask for sampled-token logprobs; return (field, raw tensor, frames) for each tensor the engine sent.

    Logprobs are a capability: UNSUPPORTED when the engine declared it lacks them
    (``--engine-lacks logprobs``), FAIL when it sends none without having declared that."""
    require_feature(fe, "logprobs")
    rid = fe.new_id(tag)
    mark = len(fe.raw_outputs)
    fe.add(fe.request(rid, max_tokens=2, logprobs=LOGPROBS))
    fe.wait_finished(rid, max_tokens=2)
    found = []
    names = ("logprob_token_ids", "logprobs", "sampled_token_ranks")
    for _, frames in fe.raw_outputs[mark:]:
        raw = decode_any(frames[0])
        for out in raw[1] or []:
            if isinstance(out, list) and len(out) > 2 and out[0] == rid and isinstance(out[2], list):
                found += [(f"new_logprobs.{name}", value, frames) for name, value in zip(names, out[2])
                          if value is not None]
    if not found:
        raise feature_missing(fe, "logprobs", f"the engine sent no logprobs for logprobs={LOGPROBS}, so no "
                                              "tensor could be checked")
    return found


def _tensor_bytes(name: str, tensor, frames: list[bytes]) -> bytes:
    if not (isinstance(tensor, list) and len(tensor) == 3 and isinstance(tensor[0], str)
            and isinstance(tensor[1], list) and all(isinstance(d, int) and d >= 0 for d in tensor[1])):
        raise CaseFailure(f"{name} is {tensor!r:.120}; a tensor is [dtype, shape, data]")
    dtype, shape, data = tensor
    if isinstance(data, int) and not isinstance(data, bool):
        if not 0 <= data < len(frames):
            raise CaseFailure(f"{name} names frame {data}, but the message has {len(frames)} frame(s)")
        data = frames[data]
    if not isinstance(data, bytes):
        raise CaseFailure(f"{name}: data is {type(data).__name__}; it is ext type 3 or a frame index")
    if name.endswith("logprob_token_ids") and len(shape) != 2:
        raise CaseFailure(f"{name}: shape {shape}; the token ids of N tokens with K alternatives are [N, K+1]")
    size = DTYPE_ITEMSIZE.get(dtype)
    if size is None:
        raise CaseFailure(f"{name}: unknown dtype {dtype!r}")
    want = size * math.prod(shape)
    if len(data) != want:
        raise CaseFailure(f"{name}: {dtype}{shape} needs {want} bytes, the data holds {len(data)}")
    return data


#: ECP-OUT-10: the numpy dtype of each LogprobsLists tensor
LOGPROB_DTYPES = {"logprob_token_ids": "<i4", "logprobs": "<f4", "sampled_token_ranks": "<i8"}


@case("ENG-OUT-9")
def test_tensor_encoding(engine):
    fe = engine
    rows: dict[str, dict[str, tuple[list, bytes]]] = {}
    for name, tensor, frames in _logprob_tensors(fe, "tensors"):
        data = _tensor_bytes(name, tensor, frames)
        field = name.split(".")[1]
        want = LOGPROB_DTYPES[field]
        if tensor[0] != want:
            raise CaseFailure(f"{name} has dtype {tensor[0]!r}; sampled logprobs are numpy arrays of {want} "
                            f"(ids <i4, logprobs <f4, ranks <i8)", clause="ECP-OUT-10")
        rows.setdefault(str(id(frames)), {})[field] = (tensor[1], data)  # the tensors of one output message
    for parts in rows.values():
        if len(parts) < 3:
            continue
        (id_shape, ids), (rank_shape, ranks) = parts["logprob_token_ids"], parts["sampled_token_ranks"]
        n = id_shape[0]
        if id_shape != [n, LOGPROBS + 1] or rank_shape != [n]:
            raise CaseFailure(f"new_logprobs shapes: ids {id_shape}, ranks {rank_shape}; for logprobs={LOGPROBS} "
                            f"they are [N, {LOGPROBS + 1}] and [N]", clause="ECP-OUT-10")
        rank_values = struct.unpack(f"<{n}q", ranks)
        if any(r < 1 for r in rank_values):
            raise CaseFailure(f"sampled_token_ranks {list(rank_values)}: a rank is 1-based (1: the most likely "
                            "token)", clause="ECP-OUT-10")


@case("ENG-OUT-10")
def test_aux_frame_threshold(engine):
    fe = engine
    for name, tensor, frames in _logprob_tensors(fe, "aux"):
        problem = tensor_placement(tensor, _tensor_bytes(name, tensor, frames))
        if problem is not None:
            raise CaseFailure(f"{name}: {problem}")
