"""Hand-written messages that no layout has, which an overlay pin names (``struct:UtilityResult``).

vLLM writes some values of a field its layout can only type ``any`` with a class the extractor does not
see as a message: ``UtilityOutput.result`` is a plain class whose encoder writes ``[type_info, value]``.
What that shape is, is written here once; :mod:`ecp.spec.overlay` pins the field to it and every
release's generated module that has the field names it. This module imports nothing of ours (the
generated modules import it while :mod:`ecp.spec` is still loading).
"""

from __future__ import annotations

from typing import Any

import msgspec


class UtilityResult(msgspec.Struct, array_like=True, omit_defaults=False):
    """The ``[type_info, value]`` envelope of a utility reply (``ECP-UTIL-2``). ``type_info`` is nil unless
    the sender runs with insecure serialization, which ecp never honours."""

    type_info: Any = None
    value: Any = None


#: every envelope by name: what a pin's ``struct:NAME`` may name besides the layout's messages
MESSAGES: dict[str, type[msgspec.Struct]] = {"UtilityResult": UtilityResult}

__all__ = ["MESSAGES", "UtilityResult"]
