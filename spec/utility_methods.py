"""The UTILITY method table of vLLM 0.33, as data.

A UTILITY call is ``[client_idx, call_id, method_name, args]``; the engine
looks ``method_name`` up on itself and calls it with ``args`` *positionally*
(``ECP-UTIL-1``). So on the wire a signature is an ordered list of argument
types; argument names are documentation only (they are vLLM 0.33's parameter
names, ``vllm/v1/engine/core.py``, and so are the defaults). A caller may leave
out trailing arguments that have a default in the engine
(:attr:`UtilityParam.default`); vLLM 0.33's frontends send every argument of
the methods they call, and an engine refuses more arguments than its method
takes (a failure message).

This is the one utility table of the project. Clients use it to build calls
and to combine per-engine replies under data parallelism
(:attr:`UtilityMethod.dp_rule`; the reference client's typed wrappers are
checked against it by ``tests/client/test_utility.py``); engines use it to know
which names they must answer and to read a call's arguments
(:meth:`UtilityMethod.bind`: names, defaults, arity, :func:`failure_message`);
``ecp spec layout`` snapshots it so that ``ecp spec diff`` can flag a removed
method or a changed signature, and a test compares it with the layout extracted
from the vLLM 0.33.0 wheel (``spec/layouts/vllm-0.33.json``).

Types use the layout type grammar of :mod:`ecp.spec.layout.types`
(``int``, ``str | nil``, ``array[str]``, ``struct:LoRARequest`` ...).
An argument whose type the source does not give is ``any``.
The weight-transfer routes are not listed: 0.33 reaches them through
``collective_rpc``. :attr:`UtilityMethod.origin` marks the methods that are
not methods of the vLLM 0.33 engine core.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from .errors import LocalProtocolError, UtilityArgumentError

#: How vLLM 0.33's *Python* client combines the replies of several engines (observed):
#: ``default`` = engine 0's answer (all engines under internal DP load balancing),
#: ``consensus`` = all engines must agree, ``all`` = logical AND of every result,
#: ``flatten`` = per-engine lists concatenated in engine order.
DPRule = Literal["default", "consensus", "all", "flatten"]

#: How a *conforming* frontend combines the replies (the clauses): every call goes to
#: every engine and waits for all (ECP-UTIL-7), then ``consensus`` (ECP-UTIL-4),
#: ``and`` (ECP-UTIL-5), ``flatten`` (ECP-UTIL-6), ``unit`` (values discarded) or
#: ``raw`` (one value per engine, for the caller to interpret).
Aggregation = Literal["consensus", "and", "flatten", "unit", "raw"]

#: the clause behind each conforming aggregation
AGGREGATION_CLAUSE: dict[str, str] = {
    "consensus": "ECP-UTIL-4", "and": "ECP-UTIL-5", "flatten": "ECP-UTIL-6",
    "unit": "ECP-UTIL-7", "raw": "ECP-UTIL-9",
}


#: the :attr:`UtilityParam.default` of an argument the engine has no default for
#: (the same marker :mod:`inspect` uses, so signatures compare directly)
REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class UtilityParam:
    """One positional argument. ``name`` is ``None`` where the source gives none;
    ``default`` is the value the engine's method uses when a caller leaves this
    argument, and every later one, out (:data:`REQUIRED`: it may not)."""

    name: str | None
    type: str
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class UtilityMethod:
    """One engine method reachable through UTILITY."""

    name: str
    params: tuple[UtilityParam, ...] | None
    result: str
    dp_rule: DPRule = "default"
    #: seen on the wire against, or from, a vLLM 0.33 peer
    observed: bool = False
    #: the conforming DP aggregation (derived from ``dp_rule`` and ``result`` unless given)
    aggregation: Aggregation = "raw"
    #: where the method comes from when it is not a method of the vLLM 0.33 engine core
    #: (``None``: vLLM 0.33); a 0.33 engine answers such a call with a failure message
    origin: str | None = None

    @property
    def aggregation_clause(self) -> str:
        return AGGREGATION_CLAUSE[self.aggregation]

    def bind(self, args: Sequence[Any]) -> dict[str, Any]:
        """A call's positional ``args`` by parameter name, each left-out argument set to its
        default: what an engine calls its method with. Raises :class:`UtilityArgumentError`
        for more arguments than the method takes or a left-out one without a default; the
        engine answers that call with ``failure_message(name, error.message)`` (``ECP-UTIL-3``)."""
        params = self.params
        if params is None:
            raise UtilityArgumentError(f"{self.name}() has no documented arguments", clause="ECP-UTIL-3")
        if len(args) > len(params):
            raise UtilityArgumentError(
                f"{self.name}() takes at most {len(params)} positional arguments but {len(args)} were given",
                clause="ECP-UTIL-3", expected=len(params), got=len(args))
        bound: dict[str, Any] = {}
        for i, p in enumerate(params):
            key = p.name or f"arg{i}"
            if i < len(args):
                bound[key] = args[i]
            elif p.required:
                raise UtilityArgumentError(f"{self.name}() missing required positional argument: '{key}'",
                                           clause="ECP-UTIL-3", expected=len(params), got=len(args))
            else:
                bound[key] = p.default
        return bound

    def check_signature(self, fn: Callable[..., Any], *, skip: int = 0, own_defaults: bool = True) -> None:
        """Raise :class:`LocalProtocolError` unless ``fn``'s parameters after the first ``skip``
        are this method's, by name and order, with this table's defaults (``own_defaults``:
        a caller-facing function such as a client wrapper) or with none (the function is
        called with :meth:`bind`'s result, which holds the defaults)."""
        params = list(inspect.signature(fn).parameters.values())[skip:]
        want = [p.name for p in self.params or ()]
        got = [p.name for p in params]
        problem = None
        if got != want:
            problem = f"parameters {got}, the table's are {want}"
        elif own_defaults:
            wrong = [(p.name, p.default, q.default) for p, q in zip(params, self.params or ())
                     if not (type(p.default) is type(q.default) and p.default == q.default)]
            if wrong:
                problem = "defaults " + ", ".join(f"{n}={d!r} (table: {'none' if t is REQUIRED else repr(t)})"
                                                  for n, d, t in wrong)
        else:
            own = [p.name for p in params if p.default is not inspect.Parameter.empty]
            if own:
                problem = f"own defaults for {own}: the table's are passed in"
        if problem is not None:
            raise LocalProtocolError(f"{getattr(fn, '__qualname__', fn)} does not fit the utility method "
                                     f"{self.name}: {problem}", clause="ECP-UTIL-1")


def failure_message(method: str, error: object) -> str:
    """The ``failure_message`` of a call that failed (``ECP-UTIL-3``), as vLLM writes it."""
    return f"Call to {method} method failed: {error}"


def no_such_method(method: str, owner: str = "EngineCoreProc") -> str:
    """The error of a call to a method the engine does not have, as vLLM's lookup raises it
    (the ``error`` of :func:`failure_message`)."""
    return f"'{owner}' object has no attribute '{method}'"


# Where the clauses require more than vLLM's Python client does (it answers
# add_lora/remove_lora/collective_rpc from engine 0 only).
_CONFORMING_OVERRIDES: dict[str, Aggregation] = {
    "add_lora": "and", "remove_lora": "and", "collective_rpc": "flatten",
}


def _conforming(name: str, result: str, dp_rule: DPRule) -> Aggregation:
    if name in _CONFORMING_OVERRIDES:
        return _CONFORMING_OVERRIDES[name]
    if dp_rule == "all":
        return "and"
    if dp_rule in ("consensus", "flatten"):
        return dp_rule
    return "unit" if result == "nil" else "raw"


def _m(name: str, params: list[tuple[Any, ...]] | None, result: str,
       dp_rule: DPRule = "default", observed: bool = False, origin: str | None = None) -> UtilityMethod:
    """``params``: ``(name, type)``, or ``(name, type, default)`` where the engine has a default."""
    ps = None if params is None else tuple(UtilityParam(*p) for p in params)
    return UtilityMethod(name, ps, result, dp_rule, observed, _conforming(name, result, dp_rule), origin)


#: the KV-connector handshake calls of vLLM's Rust frontend source newer than 0.33: neither the
#: 0.33.0 engine core nor the vllm-rs binary of the 0.33.0 wheel knows them
_RUST_AFTER_0_33 = "vLLM Rust frontend source after 0.33 (not in the vLLM 0.33.0 wheel)"


_METHODS: tuple[UtilityMethod, ...] = (
    _m("get_supported_tasks", [], "array[str]", observed=True),
    _m("reset_mm_cache", [], "nil", observed=True),
    _m("reset_encoder_cache", [], "nil"),
    _m("is_sleeping", [], "bool", "consensus", observed=True),
    _m("sleep", [("level", "int", 1), ("mode", "str", "abort")], "nil", observed=True),
    _m("wake_up", [("tags", "array[str] | nil", None)], "bool", "all", observed=True),
    _m("reset_prefix_cache", [("reset_running_requests", "bool", False), ("reset_connector", "bool", False)],
       "bool", "all", observed=True),
    _m("pause_generation", [("mode", "str", "abort"), ("clear_cache", "bool", True)], "nil", observed=True),
    _m("pause_scheduler", [("mode", "str", "abort"), ("clear_cache", "bool", True)], "nil"),
    _m("resume_scheduler", [], "nil", observed=True),
    _m("is_scheduler_paused", [], "bool", "consensus", observed=True),
    _m("get_weight_version", [], "str", "consensus"),
    _m("set_weight_version", [("weight_version", "str")], "nil"),
    _m("compute_weight_checksums", [], "array[map[str, str]]", "flatten"),
    _m("profile", [("is_start", "bool", True), ("profile_prefix", "str | nil", None),
                   ("delay_iterations", "int | nil", None), ("max_iterations", "int | nil", None),
                   ("profiler_kwargs", "map[any, any] | nil", None)], "nil"),
    _m("add_lora", [("lora_request", "struct:LoRARequest")], "bool"),
    _m("remove_lora", [("lora_id", "int")], "bool"),
    _m("list_loras", [], "array[int]"),
    _m("pin_lora", [("lora_id", "int")], "bool"),
    _m("collective_rpc", [("method", "str"), ("timeout", "float | nil", None), ("args", "array[any]", ()),
                          ("kwargs", "map[str, any] | nil", None)], "array[any]"),
    _m("release_kv_cache_memory", [], "nil"),
    _m("execute_dummy_batch", [], "nil"),
    _m("save_sharded_state", [("path", "str"), ("pattern", "str | nil", None), ("max_size", "int | nil", None)],
       "nil"),
    # elastic EP (per engine, not fanned out); the request is vLLM's ReconfigureDistributedRequest,
    # a map of 7 keys (new_data_parallel_size, new_data_parallel_rank, ...)
    _m("reinitialize_distributed", [("reconfig_request", "map[str, any]")], "str"),
    _m("commit_prepared_elastic_ep", [], "nil"),
    # fault tolerance: answered by the engine's fault-tolerance sentinel, with
    # {request_id, success, reason} for a request {instruction, params, request_id}
    _m("handle_fault_tolerance", [("ft_request", "map[str, any]")], "map[str, any]"),
    _m("get_kv_connector_handshake_entries", [], "array[map[str, any]]", origin=_RUST_AFTER_0_33),
    _m("add_remote_kv_handshake", [("remote_engine_id", "any"), ("entries", "any")], "nil",
       origin=_RUST_AFTER_0_33),
)

#: name -> method.
UTILITY_METHODS: dict[str, UtilityMethod] = {m.name: m for m in _METHODS}
