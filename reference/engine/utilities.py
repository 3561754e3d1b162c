"""The reference engine's UTILITY methods (``ECP-UTIL-*``) and the calls waiting on them.

:data:`UTILITIES` maps each wire name the engine serves to a function of the
core and the call's arguments *by name*: the spec's method table
(:data:`ecp.spec.utility_methods.UTILITY_METHODS`, plus this engine's
:data:`EXTENSIONS`) gives each method its parameters, defaults and arity, and
:class:`PendingUtilities` binds every call against it before the function runs
(so a function declares the table's parameter names, in order, without
defaults; checked at import). Every method of the spec's table is either served
or listed in :data:`NOT_SERVED` with the reason (``tests/engine/test_engine_control.py``).

The release the engine speaks (``ecp engine --vllm``) decides which of these
methods exist and how many arguments each takes: its profile's table
(:meth:`ecp.spec.profile.Profile.check_utility_call`). A method that release
lacks is answered as that release answers an unknown method; a call with an
argument count that release refuses is answered with its failure
(``profile`` takes 0..4 arguments in vLLM 0.32, 0..5 in 0.33).

A function returns the result, raises :class:`UtilityFailure` (or any exception)
to answer with ``failure_message``, or returns :class:`Wait` to answer later,
once the engine is idle (sleep and pause with mode ``wait``).
:class:`PendingUtilities` runs the calls and owes the replies; the core's
outbox carries them.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import msgspec

from ecp.spec import EngineCoreOutputs, UtilityOutput, UtilityRequest, UtilityResult
from ecp.spec.errors import LocalProtocolError, UtilityArgumentError
from ecp.spec.machine import SLEEP_TAGS
from ecp.spec.utility_methods import (
    UTILITY_METHODS, UtilityMethod, failure_message, no_such_method,
)

log = logging.getLogger("ecp.engine")



class PauseState(enum.Enum):
    """Where sleep/pause leave the scheduler (``is_scheduler_paused``)."""

    UNPAUSED = "unpaused"
    PAUSED_NEW = "paused_new"  # new ADDs are refused; admitted requests run on
    PAUSED_ALL = "paused_all"  # nothing is scheduled (mode "keep")


@dataclass
class EngineControls:
    """What the UTILITY methods set, and only they: the core reads it (``pause`` decides whether a
    step schedules, ``controls.loras`` which adapters an ADD may name, ``weight_version`` what each
    output carries)."""

    pause: PauseState = PauseState.UNPAUSED
    #: the tags asleep (``SLEEP_TAGS``); empty when awake
    sleeping_tags: set[str] = field(default_factory=set)
    sleep_level: int = 0
    weight_version: str = "default"
    profiling: bool = False
    #: lora_int_id -> the release's LoRARequest
    loras: dict[int, Any] = field(default_factory=dict)
    pinned_loras: set[int] = field(default_factory=set)


class UtilityHost(Protocol):
    """What a UTILITY method may use of its engine core (the core satisfies it; this module does not
    import the core). Methods change :attr:`controls` and call the core's own operations; they write
    no other attribute of the core."""

    profile: Any
    config: Any
    executor: Any
    scheduler: Any
    connector: Any
    controls: EngineControls
    engine_index: int
    num_blocks: int
    vocab_size: int
    lora_type: type
    step_counter: int
    num_finished: int
    num_errors: int

    @property
    def current_wave(self) -> int: ...

    def clock(self) -> float: ...

    def emit(self, client_index: int, msg: Any) -> None: ...

    def abort_all_with_outputs(self) -> list[str]: ...


class UtilityFailure(Exception):
    """A utility method refused its arguments or state; becomes ``failure_message``."""


@dataclass
class Wait:
    """A utility result that is sent once ``ready()`` holds (sleep/pause with mode ``wait``)."""

    ready: Callable[[], bool]
    complete: Callable[[], Any]


@dataclass
class _Deferred:
    call: UtilityRequest
    client_index: int
    wait: Wait


class PendingUtilities:
    """Runs UTILITY calls against a core and answers each exactly once, now or when
    its :class:`Wait` is ready (:meth:`check`, called every step)."""

    def __init__(self, core: UtilityHost, on_carried_out: Callable[[str, Any, Any], None]) -> None:
        self.core = core
        #: told of every call that succeeded (method, positional arguments, result; ``None`` for a
        #: deferred one): the core's sleep/pause state follows the spec's table from it
        self.on_carried_out = on_carried_out
        self._deferred: list[_Deferred] = []

    def handle(self, call: UtilityRequest, client: int) -> None:
        """Run ``call``; its reply (or a deferred reply) goes to ``client``."""
        name = call.method_name
        function = UTILITIES.get(name)
        release = self.core.profile
        if function is None or (name not in EXTENSIONS and name not in release.utility_methods):
            self._reply(call, client, failure=failure_message(name, no_such_method(name)))
            return
        refused = None if name in EXTENSIONS else _arity_error(release, name, call.args)
        if refused is not None:
            self._reply(call, client, failure=failure_message(name, refused))
            return
        try:
            result = function(self.core, **_METHODS[name].bind(call.args))
        except UtilityArgumentError as exc:
            self._reply(call, client, failure=failure_message(name, exc.message))
            return
        except Exception as exc:  # any failure is reported to the caller, never fatal
            log.info("Invocation of %s method failed: %s", name, exc)
            self._reply(call, client, failure=failure_message(name, exc))
            return
        self.on_carried_out(name, call.args, None if isinstance(result, Wait) else result)
        if isinstance(result, Wait):
            self._deferred.append(_Deferred(call, client, result))
            self.check()
        else:
            self._reply(call, client, value=result)

    def check(self) -> None:
        """Answer the deferred calls whose condition now holds."""
        if not self._deferred:
            return
        still = []
        for d in self._deferred:
            if d.wait.ready():
                try:
                    value = d.wait.complete()
                except Exception as exc:
                    self._reply(d.call, d.client_index, failure=failure_message(d.call.method_name, exc))
                else:
                    self._reply(d.call, d.client_index, value=value)
            else:
                still.append(d)
        self._deferred = still

    def refuse(self, call_id: int, client: int, message: str) -> None:
        """Answer a UTILITY that failed to decode, whose call id was recovered, with its failure
        (``ECP-ROB-1``: an engine may answer it so, or drop it)."""
        self._send(client, UtilityOutput(call_id, message, None))

    def _reply(self, call: UtilityRequest, client: int, *, value: Any = None, failure: str | None = None) -> None:
        if failure is not None:
            reply = UtilityOutput(call.call_id, failure, None)
        else:
            sig = self.core.profile.utility_methods.get(call.method_name)
            if sig is not None and sig.result == "nil":
                value = None  # as the release's method answers (wake_up returns nothing before vLLM 0.31)
            reply = UtilityOutput(call.call_id, None, UtilityResult(None, value))
        self._send(client, reply)

    def _send(self, client: int, reply: UtilityOutput) -> None:
        core = self.core
        core.emit(client, EngineCoreOutputs(engine_index=core.engine_index, timestamp=core.clock(),
                                            utility_output=reply))


def _arity_error(release: Any, name: str, args: Any) -> str | None:
    """Why the release's method refuses ``len(args)`` arguments (as its Python call would), or None."""
    try:
        release.check_utility_call(name, args)
    except LocalProtocolError:
        sig = release.utility(name)
        if len(args) > (sig.max_args or 0):
            return f"{name}() takes at most {sig.max_args} positional arguments but {len(args)} were given"
        missing = (sig.params or ())[len(args)].name or f"arg{len(args)}"
        return f"{name}() missing required positional argument: '{missing}'"
    return None


# ---------------------------------------------------------------------- the methods (wire names)
def _idle(core: UtilityHost) -> bool:
    return not core.scheduler.has_unfinished()

def _enter_pause(core: UtilityHost, mode: str) -> None:
    if mode not in ("abort", "wait", "keep"):
        raise UtilityFailure(f"mode must be 'abort', 'wait' or 'keep', got {mode!r}")
    if mode == "keep":
        core.controls.pause = PauseState.PAUSED_ALL
    else:
        if core.controls.pause is not PauseState.PAUSED_ALL:
            core.controls.pause = PauseState.PAUSED_NEW
        if mode == "abort":
            core.abort_all_with_outputs()

def is_sleeping(core: UtilityHost) -> bool:
    return bool(core.controls.sleeping_tags)

def sleep(core: UtilityHost, level: int, mode: str) -> Any:
    if not isinstance(level, int) or level not in (0, 1, 2):
        raise UtilityFailure(f"sleep level must be 0, 1 or 2, got {level!r}")
    _enter_pause(core, mode)

    def complete() -> None:
        core.scheduler.pool.reset()  # best effort: kept requests still hold blocks
        core.controls.sleeping_tags = set(SLEEP_TAGS)
        core.controls.sleep_level = level

    if mode == "wait" and not _idle(core):
        return Wait(lambda: _idle(core), complete)
    complete()
    return None

def wake_up(core: UtilityHost, tags: list[str] | None) -> bool:
    was_sleeping = bool(core.controls.sleeping_tags)
    if tags is None:
        core.controls.sleeping_tags.clear()
    else:
        if isinstance(tags, str) or not isinstance(tags, list):
            raise UtilityFailure(f"tags must be a list of strings or nil, got {tags!r}")
        bad = [t for t in tags if t not in SLEEP_TAGS]
        if bad:
            raise UtilityFailure(f"unknown wake_up tags {bad}; known: {list(SLEEP_TAGS)}")
        core.controls.sleeping_tags.difference_update(tags)
    awake = not core.controls.sleeping_tags
    if awake:
        # as vLLM 0.33: a wake_up that leaves everything resident resumes the scheduler, asleep or not
        if was_sleeping:
            core.controls.sleep_level = 0
        resume_scheduler(core)
    return awake

def reset_prefix_cache(core: UtilityHost, reset_running_requests: bool, reset_connector: bool) -> bool:
    if reset_running_requests:
        core.scheduler.preempt_all_running()
    if reset_connector and core.connector is not None:
        core.connector.reset()
    return core.scheduler.pool.reset()

def get_supported_tasks(core: UtilityHost) -> list[str]:
    return ["generate"]

def reset_mm_cache(core: UtilityHost) -> None:
    return None

def reset_encoder_cache(core: UtilityHost) -> None:
    return None

def profile(core: UtilityHost, is_start: bool, profile_prefix: str | None, delay_iterations: int | None,
            max_iterations: int | None, profiler_kwargs: dict | None) -> None:
    # vLLM 0.33 frontends send all 5 arguments; older ones the first 2
    core.controls.profiling = bool(is_start)

def pause_scheduler(core: UtilityHost, mode: str, clear_cache: bool) -> Any:
    _enter_pause(core, mode)

    def complete() -> None:
        if clear_cache:
            core.scheduler.pool.reset()

    if mode == "wait" and not _idle(core):
        return Wait(lambda: _idle(core), complete)
    complete()
    return None

def pause_generation(core: UtilityHost, mode: str, clear_cache: bool) -> Any:
    # whether new ADDs are refused or queued meanwhile is the spec's rule (the core's scheduler_control)
    return pause_scheduler(core, mode, clear_cache)

def resume_scheduler(core: UtilityHost) -> None:
    core.controls.pause = PauseState.UNPAUSED

def is_scheduler_paused(core: UtilityHost) -> bool:
    return core.controls.pause is not PauseState.UNPAUSED

def get_weight_version(core: UtilityHost) -> str:
    return core.controls.weight_version

def set_weight_version(core: UtilityHost, weight_version: str) -> None:
    if not isinstance(weight_version, str):
        raise UtilityFailure(f"weight version must be a string, got {weight_version!r}")
    core.controls.weight_version = weight_version

def collective_rpc(core: UtilityHost, method: str, timeout: float | None, args: list | tuple | None,
                   kwargs: dict | None) -> list[Any]:
    """One result per worker (this engine has one worker)."""
    args = list(args or ())
    kwargs = dict(kwargs or {})
    worker = {
        "echo": lambda *a, **k: [list(a), k],
        "ping": lambda: "pong",
        "get_num_blocks": lambda: core.num_blocks,
        "get_model_info": lambda: {"executor": core.config.executor, "dtype": core.executor.dtype,
                                   "vocab_size": core.vocab_size},
    }.get(method)
    if worker is None:
        raise UtilityFailure(f"'Worker' object has no attribute '{method}'")
    return [worker(*args, **kwargs)]

def _lora_enabled(core: UtilityHost) -> None:
    if core.config.max_loras < 1:
        raise UtilityFailure("LoRA is not enabled (start the engine with --max-loras N)")

def add_lora(core: UtilityHost, lora_request: Any) -> bool:
    _lora_enabled(core)
    try:  # the LoRARequest of the release spoken (0.31's has 7 fields, 0.32's 6)
        lora = msgspec.convert(lora_request, core.lora_type)
    except msgspec.ValidationError as exc:
        raise UtilityFailure(f"invalid LoRARequest: {exc}") from None
    if lora.lora_int_id < 1:
        raise UtilityFailure(f"lora_int_id must be > 0, got {lora.lora_int_id}")
    if lora.lora_int_id not in core.controls.loras and len(core.controls.loras) >= core.config.max_loras:
        evictable = [i for i in core.controls.loras if i not in core.controls.pinned_loras]
        if not evictable:
            return False
        del core.controls.loras[evictable[0]]
    core.controls.loras[lora.lora_int_id] = lora
    return True

def remove_lora(core: UtilityHost, lora_id: int) -> bool:
    _lora_enabled(core)
    core.controls.pinned_loras.discard(lora_id)
    return core.controls.loras.pop(lora_id, None) is not None

def list_loras(core: UtilityHost) -> list[int]:
    return sorted(core.controls.loras)

def pin_lora(core: UtilityHost, lora_id: int) -> bool:
    _lora_enabled(core)
    if lora_id not in core.controls.loras:
        return False
    core.controls.pinned_loras.add(lora_id)
    return True

def release_kv_cache_memory(core: UtilityHost) -> None:
    """Drop the KV cache, keeping the weights, as vLLM 0.33: only after a completed pause and while
    fully awake; the engine then sleeps with the tag ``kv_cache`` until ``wake_up``."""
    if core.controls.pause is PauseState.UNPAUSED or not _idle(core):
        raise UtilityFailure("release_kv_cache_memory() requires a completed pause first")
    if core.controls.sleeping_tags:
        raise UtilityFailure("release_kv_cache_memory() requires all executor memory to be resident")
    core.scheduler.pool.reset()  # best effort: connector leases keep their blocks
    core.controls.sleeping_tags.add("kv_cache")

def compute_weight_checksums(core: UtilityHost) -> list[dict[str, str]]:
    """One map per worker (this engine has one), weight name -> checksum: the synthetic executor has no
    weights, so its map is empty; the torch executor does not expose its weights to this layer."""
    if core.config.executor != "synthetic":
        raise UtilityFailure(f"weight checksums are not implemented for the {core.config.executor} executor")
    return [{}]

def execute_dummy_batch(core: UtilityHost) -> None:
    return None

def get_kv_connector_stats(core: UtilityHost) -> dict[str, Any] | None:
    """ecp extension: pinned/freed block counts of the reference KV connector."""
    return core.connector.snapshot() if core.connector is not None else None

def get_engine_state(core: UtilityHost) -> dict[str, Any]:
    """ecp extension: queue lengths and block-pool occupancy (for tests and tools)."""
    s = core.scheduler
    return {
        "engine_index": core.engine_index, "num_running": s.num_running, "num_waiting": s.num_waiting,
        "num_blocks": core.num_blocks, "num_free_blocks": s.pool.num_free,
        "num_used_blocks": s.pool.num_used, "num_cached_blocks": s.pool.num_cached,
        "num_preemptions": s.num_preempted_total, "step_counter": core.step_counter,
        "current_wave": core.current_wave, "paused": core.controls.pause.value,
        "sleeping_tags": sorted(core.controls.sleeping_tags), "num_finished": core.num_finished,
        "num_errors": core.num_errors,
    }


#: this engine's methods outside the spec's table (ecp extensions; a vLLM engine fails them)
EXTENSIONS: dict[str, UtilityMethod] = {
    name: UtilityMethod(name, (), result, origin="ecp reference engine")
    for name, result in (("get_kv_connector_stats", "map[str, any] | nil"), ("get_engine_state", "map[str, any]"))
}

#: wire name -> function(core, **arguments by name); the signatures are those of the spec's table
UTILITIES: dict[str, Callable[..., Any]] = {
    "is_sleeping": is_sleeping,
    "sleep": sleep,
    "wake_up": wake_up,
    "reset_prefix_cache": reset_prefix_cache,
    "get_supported_tasks": get_supported_tasks,
    "reset_mm_cache": reset_mm_cache,
    "reset_encoder_cache": reset_encoder_cache,
    "profile": profile,
    "pause_generation": pause_generation,
    "pause_scheduler": pause_scheduler,  # the name vllm-rs calls
    "resume_scheduler": resume_scheduler,
    "is_scheduler_paused": is_scheduler_paused,
    "get_weight_version": get_weight_version,
    "set_weight_version": set_weight_version,
    "collective_rpc": collective_rpc,
    "add_lora": add_lora,
    "remove_lora": remove_lora,
    "list_loras": list_loras,
    "pin_lora": pin_lora,
    "release_kv_cache_memory": release_kv_cache_memory,
    "execute_dummy_batch": execute_dummy_batch,
    "compute_weight_checksums": compute_weight_checksums,
    "get_kv_connector_stats": get_kv_connector_stats,
    "get_engine_state": get_engine_state,
}

_ELASTIC_EP = "elastic expert parallelism is not implemented (one engine per rank, fixed at start)"

#: the spec's methods this engine does not serve, and why; a call to one is answered as an unknown
#: method (``ECP-UTIL-3``)
NOT_SERVED: dict[str, str] = {
    "save_sharded_state": "the executor interface exposes no model state (the synthetic executor has none)",
    "reinitialize_distributed": _ELASTIC_EP,
    "commit_prepared_elastic_ep": _ELASTIC_EP,
    "handle_fault_tolerance": "there is no fault-tolerance sentinel",
    "get_kv_connector_handshake_entries": "not a method of the vLLM 0.33 engine core, which fails it too",
    "add_remote_kv_handshake": "not a method of the vLLM 0.33 engine core, which fails it too",
}

#: the signature each served name is bound against
_METHODS: dict[str, UtilityMethod] = {name: UTILITY_METHODS.get(name) or EXTENSIONS[name] for name in UTILITIES}
for _name, _function in UTILITIES.items():  # a function that disagrees with the table fails here, at import
    _METHODS[_name].check_signature(_function, skip=1, own_defaults=False)
