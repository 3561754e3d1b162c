"""``SamplingParams``: a msgpack *map* keyed by field name (vLLM 0.33, 43 fields).

Encoding follows msgspec's ``omit_defaults=True``: a key is omitted when its
value *is* the default object, so a decoded value re-encodes to the bytes it
came from. Because the struct declares more than 15 fields, the Python
encoder always writes a map16 header (``de 00 NN``); vllm-rs writes a fixmap.
Receivers accept both (``ECP-FRAME-5``, ``ECP-FRAME-6``).

The class is the newest release's generated one (:mod:`ecp.spec.wiretypes.current`); its
normalisation on decode and its value checks (``validation_errors``, ``ECP-REQ-3``) are
:class:`ecp.spec.behaviour.SamplingParams`, the base every release's class derives from.
"""

from __future__ import annotations

from .wiretypes.current import SamplingParams  # noqa: F401 -- re-exported: ecp.spec.sampling names it
