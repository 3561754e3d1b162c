"""Which vLLM release the engine role's harness speaks: ``--vllm RELEASE|PATH|auto``.

The harness's frontend writes and reads frames as the release under test does
(:func:`ecp.spec.profile.wire_codec`) while its cases keep thinking in vLLM 0.33's
typed messages. A release named on the command line (a shipped release, a layout
file or a vLLM tree) is fixed for the run. ``auto`` is chosen once, from the first
ready payload an engine sends: its ``vllm_version`` names a shipped release, which
the rest of the run speaks (every later launch, every spare). Until then, and
when the payload names no shipped release, the harness speaks vLLM 0.33; the
report's first lines say which release was chosen and why.

The handshake messages before the ready payload (HELLO, INIT, READY) are the same
in every shipped release, so choosing at the ready payload loses nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from ecp.spec import ProtocolError, decode_any
from ecp.spec.profile import Profile, resolve_profile, shipped_profile, shipped_releases, wire_codec
from ecp.spec import VLLM_RELEASE

AUTO = "auto"
#: the release the harness speaks while ``auto`` has not chosen yet
DEFAULT = VLLM_RELEASE


class ReleaseChoice:
    """The release a run speaks (see the module docstring); shared by every launch of a run."""

    def __init__(self, reference: str = DEFAULT) -> None:
        self.reference = reference
        self._lock = threading.Lock()
        self._codec: tuple[Profile, Any] | None = None
        if reference == AUTO:
            self._profile: Profile | None = None
            #: how the release was chosen, for the report's first lines
            self.how = "auto: no ready payload was read"
        else:
            self._profile = resolve_profile(reference)  # LayoutError: a usage error of the caller
            self.how = f"--vllm {reference}"

    @property
    def pending(self) -> bool:
        """``auto`` and no ready payload read yet."""
        return self._profile is None

    @property
    def profile(self) -> Profile:
        """The release under test (vLLM 0.33 while ``auto`` is pending)."""
        return self._profile or shipped_profile(DEFAULT)

    def codec(self) -> Any:
        """The codec of :attr:`profile` (the module :mod:`ecp.spec.codec` for vLLM 0.33), built once."""
        profile = self.profile
        if self._codec is None or self._codec[0] is not profile:
            self._codec = (profile, wire_codec(profile))
        return self._codec[1]

    def choose(self, payload: bytes) -> bool:
        """``auto``: pick the release from a ready payload's ``vllm_version``; True when this call
        chose it (then the caller switches its codec). Never raises: a payload that names no
        shipped release leaves vLLM 0.33 in place, and the report says so."""
        with self._lock:
            if self._profile is not None:
                return False
            try:
                raw = decode_any(payload)
            except ProtocolError:
                return False
            version = raw.get("vllm_version") if isinstance(raw, dict) else None
            release = ".".join(version.split(".")[:2]) if isinstance(version, str) else None
            if release not in shipped_releases():
                self._profile = shipped_profile(DEFAULT)
                self.how = f"auto: the ready payload's vllm_version is {version!r}, no shipped release"
                return True
            self._profile = shipped_profile(release)
            self.how = f"auto: the ready payload says vllm_version {version}"
            return True

    def to_dict(self) -> dict[str, str]:
        """What the report receives: the release under test and how it was chosen."""
        return {"under_test": self.profile.release, "how": self.how}
