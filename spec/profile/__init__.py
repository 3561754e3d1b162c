"""Release profiles: the protocol of any vLLM release, built from its layout and executable.

* :mod:`.model`: :class:`Profile` (the generated messages and enums of :mod:`ecp.spec.wiretypes`, type bytes,
  UTILITY arities);
* :mod:`.codec`: :class:`ProfileCodec`, the frame codec over a profile;
* :mod:`.resolve`: ``--vllm RELEASE|PATH`` -> profile (shipped release, layout file, vLLM tree);
* :mod:`.translate`, :mod:`.wire`: :func:`wire_codec`, the codec a peer of a release is spoken to with,
  in 0.33's typed messages (what the protocol machines take as ``codec=``).

::

    from ecp.spec.profile import resolve_profile

    p = resolve_profile("0.32")
    out = p.codec.decode_outputs(frames)      # EngineCoreOutputs of vLLM 0.32 (18-element outputs)
    p.utility("pause_generation")             # LocalProtocolError: pause_generation: not in vLLM 0.32
"""

from .model import Profile, UtilitySignature, build_profile, release_of
from .resolve import resolve_profile, shipped_profile, shipped_releases
from .wire import ReleaseCodec, release_of_codec, wire_codec

__all__ = ["Profile", "ReleaseCodec", "UtilitySignature", "build_profile", "release_of", "resolve_profile", "shipped_profile",
           "shipped_releases", "release_of_codec", "wire_codec"]
