"""Behaviour we write by hand for generated wire types: the bases an overlay note names.

A :class:`~ecp.spec.overlay.Note` with ``base="EngineZmqAddresses"`` makes the generated class of
that message (or enum), in every release that has it, derive from the class of the same name here
as well: its invariants checked while msgspec decodes (``__post_init__``), its readable form
(``__str__``). A base holds no fields (``__slots__ = ()``): the fields are the layout's.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidMessageError


class EngineZmqAddresses:
    """INIT's addresses hold lists an engine can connect by (``ECP-HS-2``), kept by the type itself: no
    INIT, built or decoded (msgspec calls this while it decodes), holds any other."""

    __slots__ = ()
    inputs: list[str]
    outputs: list[str]
    coordinator_input: Any
    coordinator_output: Any

    def __post_init__(self) -> None:
        if not self.inputs or len(self.inputs) != len(self.outputs):
            raise InvalidMessageError(
                f"INIT needs equal, non-empty input/output lists (got {len(self.inputs)} inputs, "
                f"{len(self.outputs)} outputs)", clause="ECP-HS-2",
                expected="len(inputs) == len(outputs) >= 1", got=(len(self.inputs), len(self.outputs)))
        if (self.coordinator_input is None) != (self.coordinator_output is None):
            raise InvalidMessageError("INIT names only one coordinator address", clause="ECP-HS-2",
                                      expected="both or neither coordinator address")


class FinishReason:
    """A finish reason reads as the string vLLM exposes to users (``stop``, ``length``, ...)."""

    __slots__ = ()
    name: str

    def __str__(self) -> str:
        return self.name.lower()
