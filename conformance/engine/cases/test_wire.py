"""Engine-role wire-shape cases (``ECP-COMPAT-4``): the release's own messages, full and sparse.

The other cases send what a plain frontend sends. These send every shape the release under test
(``--vllm``) defines for the UTILITY methods and ADD: each method with its fewest and its most
arguments, each argument of its declared type (a ``LoRARequest`` as that release lays it out), and
an ADD with every optional field a generating engine can serve set, next to one with every optional
field left out. A peer of another release refuses some of them by their shape ("takes from 1 to 5
positional arguments but 6 were given", "Expected `bool`, got `null` - at `$[4]`", an unknown
method), which is what the changes ``ecp spec diff`` rates BREAKING look like on the wire.
"""

import re
import struct

import msgspec

from ecp.conformance import capabilities
from ecp.conformance.outcomes import CaseFailure
from ecp.conformance.registry import case
from ecp.spec import FinishReason, SamplingParams
from ecp.spec.enums import RequestOutputKind
from ecp.spec.layout import types as wt
from ecp.spec.layout import wire
from ecp.spec.tensors import Tensor

#: methods whose call reconfigures the deployment, writes files or runs code by name: never sent by this
#: case (the reason is the value); the other cases and the frontend role cover their envelopes
NOT_CALLED: dict[str, str] = {
    "reinitialize_distributed": "reconfigures data parallelism",
    "commit_prepared_elastic_ep": "reconfigures expert parallelism",
    "eep_handle_engine_core_notification": "reconfigures expert parallelism",
    "handle_fault_tolerance": "drives the fault-tolerance sentinel",
    "save_sharded_state": "writes the model's weights to a path",
    "collective_rpc": "runs a worker method by name",
    "sleep": "discards weights and KV cache (ENG-UTIL-4/6 cover it)",
    "wake_up": "pairs with sleep",
}

#: an argument value a generating engine takes, by parameter name (the rest are the layout's samples)
VALUES = {
    "mode": "abort", "clear_cache": False, "is_start": False, "profile_prefix": None, "delay_iterations": None,
    "max_iterations": None, "profiler_kwargs": None, "reset_running_requests": False, "reset_connector": False,
    "lora_id": 0x5EC, "weight_version": "ecp-wire-shape",
}

#: a failure that refuses the call's shape, not its values or the engine's state (Python's TypeError for an
#: argument count, msgspec's for an argument's type; vLLM's own count check is a bare ``assert len(args) <=
#: len(params)`` in EngineCoreProc._convert_msgspec_args, answered "Call to profile method failed: " with
#: nothing after it)
_SHAPE = re.compile(r"positional argument|takes (?:from \d+ to \d+|at most \d+|exactly \d+|\d+) "
                    r"(?:positional )?argument|unexpected keyword|Expected `[^`]+`, got `[^`]+`|method failed: $")


def _argument(profile, param, mode: str):
    if param.name in VALUES:
        return VALUES[param.name]
    return wire._sample_type(profile.layout, wt.parse(param.type), mode, 0)


def _calls(profile, name: str) -> list[tuple[str, list]]:
    """(label, args) of the fewest- and the most-argument call of ``name`` in the release."""
    sig = profile.utility(name)
    if sig.params is None:  # not documented by the release: nothing to vary
        return [("no arguments", [])]
    fewest = [_argument(profile, p, "sparse") for p in sig.params[:sig.min_args]]
    most = [_argument(profile, p, "full") for p in sig.params]
    return [(f"{len(fewest)} argument(s)", fewest)] + ([(f"{len(most)} argument(s)", most)] if most != fewest else [])


@case("ENG-WIRE-1")
def test_utility_call_shapes(engine, engines):
    fe = engine
    profile = fe.profile
    engines.mark_dirty()  # pauses, weight versions: relaunched (or checked) before the next case
    refused, missing = [], []
    for name in sorted(profile.utility_methods):
        if name in NOT_CALLED:
            continue
        for label, args in _calls(profile, name):
            u = fe.call(name, args).utility
            failure = u.failure_message or ""
            if f"has no attribute '{name}'" in failure:
                missing.append(f"{name} with {label} {args!r}: {failure!r}")
            elif _SHAPE.search(failure):
                refused.append(f"{name} with {label} {args!r}: {failure!r}")
        if name in ("pause_generation", "pause_scheduler"):
            fe.call("resume_scheduler", [])
    problems = []
    if missing:
        problems.append(f"{len(missing)} call(s) of {profile.label}'s own UTILITY methods answered as unknown "
                        "methods (the engine does not have them): " + "; ".join(missing[:4]))
    if refused:
        problems.append(f"{len(refused)} call(s) of {profile.label}'s own UTILITY methods refused by their shape: "
                        + "; ".join(refused[:4]))
    if problems:
        raise CaseFailure(" | ".join(problems))


def _int_tensor(values: list[int]) -> Tensor:
    """A 1-D int64 tensor (0.33's ``prompt_logprob_token_ids``; the codec writes a list where the release has one)."""
    return Tensor("int64", [len(values)], struct.pack(f"<{len(values)}q", *values))


def _full_request(fe, rid: str):
    """An ADD with every optional field set that a generating engine serves without a declared capability
    (no LoRA adapter, multimodal input, pooling, KV transfer or grammar); logprob fields only where the
    engine was not declared to lack logprobs."""
    logprobs = "logprobs" not in fe.declared_lacks
    sp = SamplingParams(
        n=1, presence_penalty=0.1, frequency_penalty=0.1, repetition_penalty=1.05, temperature=0.0, top_p=0.9,
        top_k=5, min_p=0.01, seed=7, stop=["\x00never"], stop_token_ids=[31_990], ignore_eos=True, max_tokens=3,
        min_tokens=1, logprobs=1 if logprobs else None, prompt_logprobs=1 if logprobs else None,
        prompt_logprob_token_ids=_int_tensor([1, 2]) if logprobs else None, logprob_token_ids=[3] if logprobs else None,
        detokenize=True, skip_special_tokens=False, spaces_between_special_tokens=False,
        include_stop_str_in_output=True, output_kind=RequestOutputKind.DELTA, logit_bias={5: 0.5},
        allowed_token_ids=None, extra_args={"ecp": "wire-shape"}, bad_words=None, skip_reading_prefix_cache=True)
    req = fe.request(rid, max_tokens=3)
    return msgspec.structs.replace(req, sampling_params=sp, cache_salt="ecp-salt", priority=0,
                                   trace_headers={"x-ecp": "1"})


@case("ENG-WIRE-2")
def test_add_shapes(engine):
    fe = engine
    capabilities.require_release(fe.profile, message="EngineCoreRequest")
    full, sparse = fe.new_id("wire-full"), fe.new_id("wire-sparse")
    fe.add(_full_request(fe, full))
    plain = fe.request(sparse, max_tokens=3)
    fe.add(msgspec.structs.replace(plain, sampling_params=SamplingParams(max_tokens=3, ignore_eos=True,
                                                                         output_kind=RequestOutputKind.DELTA)))
    for rid, what in ((full, "every optional field set"), (sparse, "every optional field left out")):
        term = fe.wait_finished(rid)
        reason = term.output.finish_reason
        if reason not in (FinishReason.LENGTH, FinishReason.STOP):
            raise CaseFailure(f"the ADD with {what} ({fe.profile.label}'s layout) ended with {reason!r} after "
                            f"{len(fe.tokens(rid))} token(s): refused, not served")
    fe.serves(after="the full and the sparse ADD")
