"""Release profiles: the protocol of any vLLM release, built from its layout and executable.

* :mod:`.types`: a layout's messages and enums as generated msgspec classes;
* :mod:`.model`: :class:`Profile` (messages, enums, type bytes, UTILITY arities);
* :mod:`.codec`: :class:`ProfileCodec`, the frame codec over a profile;
* :mod:`.resolve`: ``--vllm RELEASE|PATH`` -> profile (shipped release, layout file, vLLM tree).

::

    from ecp.spec.profile import resolve_profile

    p = resolve_profile("0.32")
    out = p.codec.decode_outputs(frames)      # EngineCoreOutputs of vLLM 0.32 (18-element outputs)
    p.utility("pause_generation")             # LocalProtocolError: pause_generation: not in vLLM 0.32
"""

from .model import Profile, UtilitySignature, build_profile, release_of
from .resolve import resolve_profile, shipped_profile, shipped_releases

__all__ = ["Profile", "UtilitySignature", "build_profile", "release_of", "resolve_profile", "shipped_profile",
           "shipped_releases"]
