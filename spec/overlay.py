"""What we write by hand about the wire types, applied to every release that has the message or field.

A release's layout (``spec/layouts/vllm-X.Y.json``, read from vLLM's code) is the one source of its
message types; :mod:`ecp.spec.layout.codegen` renders it as a module of :mod:`ecp.spec.wiretypes`.
What vLLM's code does not say -- a docstring, the clause a message is the subject of, an invariant a
receiver may rely on and the code that keeps it (a base class of :mod:`ecp.spec.behaviour`) -- is
written here once, keyed by ``Message`` (or enum name), ``Message.field``
or ``Enum.MEMBER``, and the generator puts it into the class docstring or a ``#:`` comment above the
field in every release whose layout has that name. A key no shipped layout has fails
``tests/spec/test_wiretypes.py``.

Changing a note changes generated code: run ``ecp spec types`` (``--check`` fails while a module is
stale).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Note:
    """What we write by hand about a message, a field or an enum."""

    #: the docstring (a message, an enum) or the ``#:`` comment (a field)
    doc: str = ""
    #: the clause the message or field is the subject of (``ECP-REQ-1``)
    clause: str | None = None
    #: what a receiver may rely on beyond the type (and where it is checked)
    invariant: str | None = None
    #: a class of :mod:`ecp.spec.behaviour` the generated class also derives from (its ``__post_init__``
    #: checks, its properties, its ``__str__``): behaviour we write by hand, in every release
    base: str | None = None
    #: a field's wire type (the layouts' grammar, ``int | nil``) where the layout says ``any`` because the
    #: extractor could not resolve it statically: what vLLM's code actually sends there. Allowed only on a
    #: field the layout types ``any`` (rendering any other fails); a ``struct:`` of a message no layout has
    #: names a hand-written envelope of :mod:`ecp.spec.envelope`
    pin: str | None = None
    #: a decode limit: the receiver keeps what the layout types as a message untyped, every ``struct:`` of
    #: the field's type taken as ``map[str, any]`` (``"map"``: a config dataclass or map-encoded struct) or
    #: as ``any`` (``"any"``: statistics a receiver must not fail a step on, ECP-OUT-7)
    receive: str | None = None
    #: the Python container an ``array`` of the field decodes into, where vLLM holds a set (``"set"``:
    #: order and duplicates carry no meaning); the wire is the array either way
    holds: str | None = None
    #: why the pin or decode limit is right (rendered beside the field)
    why: str | None = None

    def text(self) -> str:
        """The note as the generated docstring or comment writes it."""
        parts = [self.doc.strip()] if self.doc.strip() else []
        if self.invariant:
            parts.append(f"Invariant: {self.invariant.strip()}")
        if self.clause:
            parts.append(f"Clause: {self.clause}.")
        if self.pin:
            parts.append(f"Typed ``{self.pin}`` where the layout says ``any``" + (f": {self.why.strip()}" if self.why else "."))
        elif self.receive:
            parts.append(f"Received untyped (each message of its type as ``{'map[str, any]' if self.receive == 'map' else 'any'}``)"
                         + (f": {self.why.strip()}" if self.why else "."))
        return "\n\n".join(parts)


_STATS = ("typed statistics a receiver keeps as they come: scheduler stats are optional for frontends and a "
          "receiver must not fail a step on them (ECP-OUT-7).")

OVERLAY: dict[str, Note] = {
    # ------------------------------------------------------------------ enums
    "FinishReason": Note("Why a request finished. Out-of-range values fail decoding; ``str()`` gives the "
                         "string vLLM exposes to users (``stop``).", clause="ECP-OUT-4", base="FinishReason"),
    "EngineCoreEventType": Note("The kind of a request event (``EngineCoreEvent.type``)."),
    "RequestOutputKind": Note("What each output of a request holds: everything so far, the delta, or only "
                              "the final result."),
    # ------------------------------------------------------------------ handshake
    "Hello": Note("Engine -> frontend, the first handshake message.", clause="ECP-HS-1"),
    "Ready": Note("Engine -> frontend, the last handshake message.\n\n``parallel_config_hash`` is present only "
                  "when the engine's DP size > 1; the elastic-EP keys only with elastic EP.", clause="ECP-HS-5"),
    "EngineZmqAddresses": Note(
        "Where the engine connects. ``inputs[i]``/``outputs[i]`` belong to client i.",
        invariant="``inputs`` and ``outputs`` are non-empty lists of equal length, and the two coordinator "
                  "addresses are both given or both absent (ECP-HS-2); checked while it decodes.",
        clause="ECP-HS-2", base="EngineZmqAddresses"),
    "EngineHandshakeMetadata": Note("INIT, frontend -> engine.", clause="ECP-HS-2"),
    "EngineHandshakeMetadata.parallel_config": Note(
        "Empty, or the DP coordination keys (``data_parallel_master_ip``, ...)."),
    "Ready.parallel_config_hash": Note(
        pin="str | nil", why="``ParallelConfig.compute_hash()`` returns a SHA-256 hex digest (vllm/config/utils.py hash_factors)."),
    "Ready.coord_store_port": Note(pin="int | nil", why="``ParallelConfig._coord_store_port`` is declared int."),
    "Ready.elastic_ep_max_dp_size": Note(
        pin="int | nil", why="``ParallelConfig.elastic_ep_max_dp_size`` is declared int."),
    "Ready.num_redundant_experts": Note(
        pin="int | nil", why="``EPLBConfig.num_redundant_experts`` is declared int."),
    "EngineCoreReadyResponse.kv_events_config": Note(
        receive="map", why="``KVEventsConfig`` is a config dataclass (vllm/config/kv_events.py), a msgpack map "
                           "on the wire; a receiver checks only that it is a map."),
    "EngineCoreReadyResponse": Note("The ready payload on each input socket (a dataclass in vLLM: every key is "
                                    "emitted); every required key with its declared type (ECP-HS-4).",
                                    clause="ECP-HS-3"),
    # ------------------------------------------------------------------ requests
    "EngineCoreRequest": Note("The ADD payload. Field order is the wire order; senders emit every element "
                              "(ECP-FRAME-3), a decoder needs at least the required ones (ECP-FRAME-4).",
                              clause="ECP-REQ-1", base="EngineCoreRequest"),
    "EngineCoreRequest.request_id": Note("The engine-internal request id every output and ABORT names."),
    "EngineCoreRequest.client_index": Note("The client (``output[i]``) the engine answers this request on."),
    "EngineCoreRequest.current_wave": Note("The DP wave the frontend believes current (ECP-DP-4)."),
    "EngineCoreRequest.abort_immediately": Note("Abort as soon as the request is admitted (ECP-ABORT-3)."),
    "LoRARequest": Note("A LoRA adapter reference.\n\nvLLM 0.31 and older carry a 7th element, "
                        "``tensorizer_config_dict``, at position 4 (removed in 0.32): every later field is shifted "
                        "between those releases and 0.32 onwards (ECP-FRAME-3).",
                        invariant="``lora_int_id >= 1``; receivers refuse anything less."),
    "LateInteractionParams": Note(
        "Late-interaction scoring metadata of a pooling request.\n\n``mode`` is ``cache_query`` or "
        "``score_doc``; ``query_key`` names the cached query (also used for DP routing); ``query_uses`` is how "
        "many documents will be scored against it (a positive int for ``cache_query``)."),
    "LateChunkingParams": Note("Mean-pool token states into chunks of ``chunk_size`` tokens.",
                               invariant="``0 < chunk_size < 2**63``."),
    "PoolingParams": Note(
        "Pooling parameters.\n\n``task`` is one of ``embed``, ``classify``, ``token_embed``, ``token_classify``, "
        "``plugin``, ``embed&token_classify``. vllm-rs sends only the first 5 elements; a receiver applies the "
        "defaults to the rest."),
    "PlaceholderRange": Note("Where a multimodal item sits in the prompt."),
    "MultiModalFeatureSpec": Note(
        "One multimodal item of ``mm_features``.\n\n``data`` maps kwarg name -> ``{data: nested tensors/numbers, "
        "field: [factory, kwargs]}`` (factory ``batched``/``flat``/``shared``) or is nil when the item is already "
        "cached in the engine. Tensors inside an item's ``data`` (``[dtype, shape, ext 3 | frame index]``) are "
        "decoded to ``Tensor``; everything else stays as plain values.", base="MultiModalFeatureSpec"),
    "MultiModalFeatureSpec.data": Note(
        pin="map[str, any] | nil",
        why="``MultiModalKwargsItem`` is a UserDict vLLM's encoder writes as a map (nil: cached in the engine)."),
    "KvHintAction": Note("One versioned KV hint action. ``payload`` holds JSON-compatible values whose schema is "
                         "the action's own."),
    "KvHintsEnvelope": Note("``kv_hints``: a protocol version, a message id and the actions."),
    "SamplingParams": Note(
        "Sampling parameters, a map keyed by field name.\n\nA key is omitted when its value is the default, so a "
        "decoded value re-encodes to the bytes it came from; a Python sender writes a map16 header, vllm-rs a "
        "fixmap, receivers accept both (ECP-FRAME-5, ECP-FRAME-6).",
        invariant="the value checks vLLM runs on decode (``n >= 1``, penalties in range, ...) are separate "
                  "from decoding: an engine answers an invalid request with an ERROR output (ECP-REQ-3).",
        base="SamplingParams"),
    "SamplingParams.structured_outputs": Note(
        "``{json|regex|choice|grammar|json_object|structural_tag: ..., disable_*: ...}``.", receive="map",
        why="``StructuredOutputsParams`` is a dataclass (vllm/sampling_params.py), a msgpack map on the wire."),
    "SamplingParams.extra_args": Note("Carries ``kv_transfer_params`` for P/D disaggregation."),
    "SamplingParams.repetition_detection": Note(
        "``{max_pattern_size, min_pattern_size, min_count}``.", receive="map",
        why="``RepetitionDetectionParams`` is a dataclass (vllm/sampling_params.py), a msgpack map on the wire."),
    "SamplingParams._all_stop_token_ids": Note(holds="set"),
    # ------------------------------------------------------------------ control
    "UtilityRequest": Note(
        "The UTILITY payload.\n\n``call_id`` is any u64 (Python clients use ``uuid1().int >> 64``, vllm-rs counts "
        "1, 2, ...); the engine echoes it verbatim.", clause="ECP-UTIL-1"),
    "UtilityRequest.call_id": Note(
        pin="int", why="the Python client's call id is ``uuid1().int >> 64`` (vllm/v1/engine/core_client.py), vllm-rs "
                       "counts 1, 2, ..."),
    "UtilityRequest.args": Note("Required: the engine unpacks exactly four items."),
    "StartDPWave": Note("The START_DP_WAVE payload.", clause="ECP-DP-4"),
    "StartDPWave.exclude_eng_index": Note("Required: the engine unpacks exactly two items."),
    # ------------------------------------------------------------------ outputs
    "EngineCoreOutputs": Note("Everything one engine sends one client in one message.", clause="ECP-FRAME-2",
                              base="EngineCoreOutputs"),
    "EngineCoreOutputs.finished_requests": Note(holds="set"),
    "EngineCoreOutputs.wave_complete": Note("DP control, meant for the coordinator only (ECP-OUT-6)."),
    "EngineCoreOutputs.start_wave": Note("DP control, meant for the coordinator only (ECP-OUT-6)."),
    "EngineCoreOutput": Note("One request's progress in one step. A non-nil ``finish_reason`` marks the last "
                             "output of the request.", clause="ECP-OUT-4", base="EngineCoreOutput"),
    "EngineCoreOutput.spec_decode_metrics": Note(
        receive="map", why="``RequestSpecDecodeMetrics`` is a map-encoded msgspec Struct (vllm/v1/metrics/stats.py); a "
                           "receiver checks only that it is a map."),
    "EngineCoreEvent": Note("``{type, timestamp}``; the timestamp is the engine's monotonic clock."),
    "RequestError": Note("Why a request ended with ERROR.", clause="ECP-OUT-5"),
    "SchedulerStats": Note("Per-step scheduler snapshot. Optional for frontends.", clause="ECP-OUT-7"),
    "SchedulerStats.num_kv_fetch_reqs_by_stage": Note(
        "Requests per KV-fetch stage; the key set is open, a receiver must not assume it."),
    **{f"SchedulerStats.{name}": Note(receive="any", why=_STATS) for name in (
        "iteration_details", "kv_cache_eviction_events", "spec_decoding_stats", "cudagraph_stats", "perf_stats")},
    "LogprobsLists": Note(
        "Sampled-token logprobs: ``[token_ids [N,K+1], logprobs float32 [N,K+1], ranks [N], cu]``.\n\nRow i "
        "holds the sampled token first, then the top-K alternatives."),
    "LogprobsTensors": Note(
        "Prompt logprobs, laid out as ``LogprobsLists``.\n\n``cu_num_generated_tokens_tensor``, where the "
        "release has it, carries the per-request boundaries as a tensor when the sender only has them on "
        "device; a receiver uses it when ``cu_num_generated_tokens`` is nil."),
    "SamplingMaskLists": Note(
        "The tokens a request was allowed to sample, in CSR form: ``token_ids`` of every kept token, "
        "``offsets`` (``[positions + 1]``, nil for a single position) and ``cu_num_generated_tokens`` for "
        "multi-position batches."),
    "UtilityOutput": Note("A utility reply: ``[call_id, failure_message, result]`` (always 3 elements).",
                          clause="ECP-UTIL-2"),
    "UtilityOutput.result": Note(
        "The ``[type_info, value]`` envelope (ECP-UTIL-2).", pin="struct:UtilityResult | nil",
        why="vLLM's ``UtilityResult`` is a plain class its encoder writes as ``[type_info, value]``."),
}
