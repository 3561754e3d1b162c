"""The vLLM release the client's engines speak (``ClientConfig.vllm``): its codec and its UTILITY methods.

vLLM 0.33 is the client's own release: its engines are spoken to with :mod:`ecp.spec.codec` and
utility calls go out as the caller made them (:attr:`ClientRelease.profile` is ``None``). For any
other release (a shipped one, a layout file or a vLLM tree, :func:`ecp.spec.profile.resolve_profile`)
frames are written and read as that release does (:func:`ecp.spec.profile.wire_codec`) and a call is
checked against the release's method table before anything is sent (:meth:`ClientRelease.fit`).
"""

from __future__ import annotations

from typing import Any, Sequence

from ecp.spec import VLLM_RELEASE, VLLM_VERSION, LocalProtocolError
from ecp.spec import codec as codec_033
from ecp.spec.profile import Profile, resolve_profile, wire_codec

#: how ``--vllm`` names the client's own release (no profile is built for it)
OWN = (VLLM_RELEASE, VLLM_VERSION, f"vllm-{VLLM_RELEASE}")


class NotInRelease(LocalProtocolError):
    """A UTILITY call the engines' release cannot take (no such method, or not with these
    arguments); nothing was sent. The message names the release."""


class ClientRelease:
    """What the client needs of one release: ``codec`` for its protocol machine and :meth:`fit`."""

    def __init__(self, reference: str = VLLM_RELEASE) -> None:
        if reference in OWN:
            self.codec, self.profile, self.label = codec_033, None, f"vLLM {VLLM_RELEASE}"
            return
        profile = resolve_profile(reference)
        self.codec: Any = wire_codec(profile)
        #: ``None`` for vLLM 0.33 (nothing to check: the client's wrappers are 0.33's)
        self.profile: Profile | None = None if self.codec is codec_033 else profile
        self.label = profile.label

    def fit(self, method: str, args: Sequence[Any]) -> Sequence[Any]:
        """``args`` as an engine of the release takes them: arguments past the release's last
        parameter are dropped while they are ``None`` (a parameter a later release added, left
        unset: vLLM 0.33's ``profile`` sends 5, 0.32 takes at most 4). Raises
        :class:`~ecp.spec.errors.LocalProtocolError` naming the release when it has no such
        method ("pause_generation: not in vLLM 0.32", ``ECP-COMPAT-1``) or the call still does
        not fit (``ECP-UTIL-1``) as :class:`NotInRelease`; nothing is then sent."""
        profile = self.profile
        if profile is None:
            return args
        try:
            top = profile.utility(method).max_args
            if top is not None and len(args) > top and all(a is None for a in args[top:]):
                args = args[:top]
            profile.check_utility_call(method, args)
        except LocalProtocolError as exc:
            raise NotInRelease(exc.message, clause=exc.clause, expected=exc.expected, got=exc.got) from None
        return args
