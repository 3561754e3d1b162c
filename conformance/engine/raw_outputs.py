"""Rules of an output message's raw frames that a tolerant decoder cannot see.

A receiver decodes short arrays (``ECP-FRAME-4``) and inline tensors of any size, so the protocol
machine cannot see ``ECP-FRAME-3`` (full-length arrays) or ``ECP-FRAME-8`` (the aux-frame
threshold) broken; the engine role's cases (``ENG-OUT-6``, ``ENG-OUT-10``) and the explorer's
oracle both read the raw frames with these functions.
"""

from __future__ import annotations

from typing import Any, Sequence

from ecp.spec import ProtocolError, decode_any
from ecp.spec.enums import AUX_FRAME_THRESHOLD

#: array lengths of vLLM 0.33's array-like output structs
OUTPUTS_LEN, OUTPUT_LEN, UTILITY_LEN = 9, 19, 3


def full_lengths(profile: Any | None) -> tuple[int, int, int]:
    """(EngineCoreOutputs, EngineCoreOutput, UtilityOutput) lengths in a release (0.33's for ``None``)."""
    if profile is None:
        return OUTPUTS_LEN, OUTPUT_LEN, UTILITY_LEN
    messages = profile.layout.messages
    return tuple(len(messages[m].fields) for m in ("EngineCoreOutputs", "EngineCoreOutput", "UtilityOutput"))


def short_array(frames: Sequence[bytes], profile: Any | None = None) -> str | None:
    """What is not full length in the output message ``frames`` in the release ``profile``
    (:class:`ecp.spec.profile.Profile`; vLLM 0.33 by default) (None: every array is, or the message
    is not an array at all -- a decode error the machine reports)."""
    OUTPUTS_LEN, OUTPUT_LEN, UTILITY_LEN = full_lengths(profile)  # noqa: N806 - the module's names, per release
    try:
        raw = decode_any(frames[0])
    except ProtocolError:
        return None
    if not isinstance(raw, list):
        return f"EngineCoreOutputs is a {type(raw).__name__}, not an array"
    if len(raw) != OUTPUTS_LEN:
        return f"EngineCoreOutputs has {len(raw)} elements, expected all {OUTPUTS_LEN}"
    for out in raw[1] or []:
        if isinstance(out, list) and len(out) != OUTPUT_LEN:
            return f"an EngineCoreOutput for {out[0]!r} has {len(out)} elements, expected all {OUTPUT_LEN}"
    if isinstance(raw[4], list) and len(raw[4]) != UTILITY_LEN:
        return f"UtilityOutput has {len(raw[4])} elements, expected all {UTILITY_LEN}"
    return None


def tensor_placement(tensor: list, data: bytes) -> str | None:
    """Whether a tensor ``[dtype, shape, data]`` whose buffer is ``data`` travels where its size says
    (None: it does)."""
    inline = not isinstance(tensor[2], int)
    if inline and len(data) >= AUX_FRAME_THRESHOLD:
        return (f"a {len(data)}-byte buffer is sent inline; buffers of {AUX_FRAME_THRESHOLD} bytes or more go to "
                "aux frames")
    if not inline and len(data) < AUX_FRAME_THRESHOLD:
        return f"a {len(data)}-byte buffer is sent in an aux frame; smaller than {AUX_FRAME_THRESHOLD} bytes it goes inline"
    return None


def misplaced_tensor(frames: Sequence[bytes]) -> str | None:
    """The first tensor of an output message (sampled or prompt logprobs) that breaks
    :func:`tensor_placement` (None: none does, or the message cannot be read -- the machine's)."""
    try:
        raw = decode_any(frames[0])
    except ProtocolError:
        return None
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        return None
    for out in raw[1]:
        for field in (2, 3):  # new_logprobs, new_prompt_logprobs_tensors
            tensors = out[field] if isinstance(out, list) and len(out) > field else None
            for tensor in tensors if isinstance(tensors, list) else ():
                if not (isinstance(tensor, list) and len(tensor) == 3):
                    continue
                data = tensor[2]
                if isinstance(data, int) and not isinstance(data, bool):
                    data = frames[data] if 0 <= data < len(frames) else None
                if isinstance(data, (bytes, bytearray, memoryview)):
                    problem = tensor_placement(tensor, bytes(data))
                    if problem is not None:
                        return f"{out[0]!r}: {problem}"
    return None
