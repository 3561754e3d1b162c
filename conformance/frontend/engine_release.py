"""The vLLM release the scripted engines speak (``ecp conformance frontend --vllm RELEASE|PATH``).

An :class:`EngineRelease` is what the frontend role needs of one release: the codec its scripted
engines write and read frames with (:func:`ecp.spec.profile.wire_codec`; the cases keep vLLM
0.33's typed messages), the ready payload such an engine sends (:meth:`EngineRelease.ready_payload`)
and the check a case makes before it needs something the release may lack
(:meth:`EngineRelease.require`: UNSUPPORTED naming the release). vLLM 0.33, the suite's own
release, has no profile here: its engines use :mod:`ecp.spec.codec` itself.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ecp.spec import VLLM_RELEASE, VLLM_VERSION
from ecp.spec import codec as codec_033
from ecp.spec.errors import LocalProtocolError
from ecp.spec.profile import Profile, resolve_profile, wire_codec

from ..outcomes import Unsupported

#: the suite's own release, as ``--vllm`` names it
OWN = VLLM_RELEASE


class EngineRelease:
    """One release as the scripted engines speak it (build it with :func:`engine_release`)."""

    def __init__(self, profile: Profile) -> None:
        self.codec: Any = wire_codec(profile)
        #: the release's layout, for every release (0.33 included): what a case asks of its shapes
        self.layout = profile.layout
        #: ``None`` for vLLM 0.33 (the suite's own types and codec)
        self.profile: Profile | None = None if self.codec is codec_033 else profile
        self.release = profile.release
        self.label = profile.label
        self.vllm_version = profile.vllm_version
        ready = profile.layout.messages["EngineCoreReadyResponse"]
        #: the ready payload's keys in this release (a map: every key a dataclass of it writes)
        self._ready_keys = frozenset(f.name for f in ready.fields)

    def __repr__(self) -> str:
        return f"<EngineRelease {self.label}>"

    def ready_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A ready payload written for vLLM 0.33 as an engine of this release sends it: the keys of
        0.33's ready payload that the release lacks are left out and ``vllm_version`` (when it is
        0.33's) is the release's. Any other key stays: a case that adds an unknown key means it."""
        if self.profile is None:
            return payload
        from ecp.spec.profile.resolve import shipped_profile

        known_033 = {f.name for f in shipped_profile(OWN).layout.messages["EngineCoreReadyResponse"].fields}
        out = {k: v for k, v in payload.items() if k in self._ready_keys or k not in known_033}
        if out.get("vllm_version") == VLLM_VERSION:
            out["vllm_version"] = self.vllm_version
        return out

    def require(self, *, utility: str | None = None, field: tuple[str, str] | None = None) -> None:
        """Raise :class:`Unsupported` naming the release when it lacks the UTILITY method ``utility``
        or the message field ``field`` (``("EngineCoreReadyResponse", "supports_lora")``): the case
        cannot exercise its requirement against an engine of this release."""
        profile = self.profile
        if profile is None:
            return
        if utility is not None:
            try:
                profile.utility(utility)
            except LocalProtocolError as exc:
                raise Unsupported(exc.message) from None
        if field is not None and not profile.has_field(*field):
            raise Unsupported(f"{field[0]}.{field[1]}: not in {self.label}")


@lru_cache(maxsize=None)
def engine_release(reference: str = OWN) -> EngineRelease:
    """The release ``--vllm`` names (a shipped release, a layout file or a vLLM tree), built once."""
    return EngineRelease(resolve_profile(reference))
