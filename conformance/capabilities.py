"""Capabilities a peer may lack, how it declares that it lacks one, and what a case then reports.

Some requirements can only be exercised through an optional capability: the tensor cases need an
engine that returns logprobs, the wave cases a DP deployment that runs waves. A run that cannot
exercise such a requirement must not pass silently (ECP-HS-4.3): a peer that lacks a capability
*declares* it, in its ready payload where vLLM 0.33 has a key for it (``enable_sleep_mode``), else
with the harness flag ``--engine-lacks CAP`` / ``--frontend-lacks CAP``. A case that finds a
capability missing then reports

* UNSUPPORTED, naming the declaration, when the peer declared it; the case does not run;
* FAIL, saying how to declare it, when the peer did not: the requirement went unchecked.

This module is the one table of those capabilities; cases call :func:`require` before they start
and raise :func:`missing` when the peer turns out to lack what it did not declare.

The release under test (``--vllm``) is the other source of UNSUPPORTED: a case that needs a UTILITY
method, message or field the release does not have calls :func:`require_release`, which names the
release ("pause_generation: not in vLLM 0.32"); the release's profile is the one table of what it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .outcomes import Unsupported, CaseFailure


@dataclass(frozen=True)
class Capability:
    """One optional capability of a role's peer."""

    role: str
    name: str
    #: what it is, for messages ("sampled-token logprobs")
    what: str
    #: engine role: the ready-payload key that declares it, where vLLM 0.33 has one
    ready_key: str | None = None
    #: reads that key off a decoded ready payload: True = the engine has the capability
    ready_value: Callable[[Any], bool] | None = None

    @property
    def flag(self) -> str:
        return f"--{self.role}-lacks {self.name}"


CAPABILITIES: tuple[Capability, ...] = (
    Capability("engine", "sleep", "sleep mode (sleep, wake_up and a truthful is_sleeping, ECP-UTIL-8)",
               "enable_sleep_mode", lambda p: bool(p.enable_sleep_mode)),
    Capability("engine", "logprobs", "sampled-token logprobs (SamplingParams.logprobs -> new_logprobs)"),
    Capability("engine", "dp_waves", "DP waves (start_wave / wave_complete to the coordinator, ECP-DP-5; vLLM "
                                     "0.33 runs them for MoE models only)"),
    Capability("frontend", "dp_waves", "DP waves at its coordinator (START_DP_WAVE rebroadcast, ECP-DP-5; vLLM "
                                       "0.33 runs them for MoE models only)"),
)


def get(role: str, name: str) -> Capability:
    for cap in CAPABILITIES:
        if cap.role == role and cap.name == name:
            return cap
    raise KeyError(f"unknown {role} capability {name!r}")


def flag_choices(role: str) -> list[str]:
    """The capabilities of ``role`` declared with the harness flag (those without a ready-payload key,
    and those whose key a release's ready payload may lack)."""
    return [c.name for c in CAPABILITIES if c.role == role]


def declaration(cap: Capability, lacks: Iterable[str], ready_payloads: Iterable[Any] = (),
                profile: Any = None) -> str | None:
    """How the peer declared that it lacks ``cap``, or None when it did not. ``profile``: the release
    under test; where its ready payload has no key for ``cap`` (``enable_sleep_mode`` before vLLM
    0.28), the capability is declared with the flag instead."""
    if cap.ready_key is not None and profile is not None and not profile.has_field(
            profile.frames["ready payload"], cap.ready_key):
        return f"{cap.flag} was given" if cap.name in set(lacks) else None
    if cap.ready_key is not None:
        payloads = list(ready_payloads)
        if not payloads or not all(cap.ready_value(p) for p in payloads):
            return f"{cap.ready_key} is false in its ready payload"
        return None
    return f"{cap.flag} was given" if cap.name in set(lacks) else None


def require(cap: Capability, lacks: Iterable[str], ready_payloads: Iterable[Any] = (), profile: Any = None) -> None:
    """Raise :class:`Unsupported` naming the declaration when the peer declared it lacks ``cap``."""
    said = declaration(cap, lacks, ready_payloads, profile)
    if said is not None:
        raise Unsupported(f"the {cap.role} declares it lacks {cap.what}: {said}")


def missing(cap: Capability, observed: str) -> CaseFailure:
    """The FAIL for a capability the peer lacks without having declared it (raise it)."""
    how = (f"its ready payload says {cap.ready_key}: false" if cap.ready_key else f"run with {cap.flag}")
    return CaseFailure(f"{observed}; the {cap.role} did not declare that it lacks {cap.what}, so the requirement "
                     f"went unchecked: an {cap.role} without it declares so ({how}) and the case is then "
                     "UNSUPPORTED")


def require_release(profile: Any, *, utility: str | None = None, message: str | None = None,
                    field: str | None = None) -> None:
    """Raise :class:`Unsupported` naming the release when ``profile`` (the release under test,
    :class:`ecp.spec.profile.Profile`) lacks the UTILITY method ``utility``, the message
    ``message`` or the field ``field`` (``"EngineCoreOutput.error"``)."""
    from ecp.spec.errors import LocalProtocolError

    try:
        if utility is not None:
            profile.utility(utility)
        if message is not None:
            profile.message(message)
    except LocalProtocolError as exc:
        raise Unsupported(exc.message) from None
    if field is not None:
        owner, _, name = field.partition(".")
        if not profile.has_field(owner, name):
            raise Unsupported(f"{field}: not in {profile.label}")


def pause_method(profile: Any) -> str:
    """The UTILITY method that pauses generation in the release under test: ``pause_generation``
    (a user pause, vLLM 0.33), else ``pause_scheduler`` (every release since 0.21); raises
    :class:`Unsupported` naming the release when it has neither."""
    for name in ("pause_generation", "pause_scheduler"):
        if name in profile.utility_methods:
            return name
    raise Unsupported(f"pause_generation: not in {profile.label} (nor pause_scheduler)")
