"""Handshake rewriting: INIT's addresses out, the echoed coordinator addresses back.

INIT (``EngineHandshakeMetadata``, ``ECP-HS-2``) tells an engine where to
connect: ``addresses.inputs[i]``/``outputs[i]`` and, with a DP coordinator,
``coordinator_input``/``coordinator_output``. The monitor replaces each with
an address it binds itself and connects onward to the original. Everything
else in INIT (``parallel_config``, ``frontend_stats_publish_address``, keys
this release does not know) is kept as sent: the map is decoded generically,
four values are replaced, and it is re-encoded in the same key order.

The engine's ready payload (``EngineCoreReadyResponse``) echoes the coordinator
addresses it was given (``coordinator_input_address``/``coordinator_output_address``),
and vLLM 0.33's frontend asserts that every engine echoes the same ones
(``MPClient._apply_ready_response``). :func:`restore_ready_response` maps the
relay's addresses back to the originals on the way to the frontend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ecp.spec import ProtocolError
from ecp.spec.codec import decode_any


class RewriteError(Exception):
    """INIT cannot be rewritten (undecodable, or addresses of the wrong shape); the
    monitor forwards it unchanged and that engine's traffic bypasses the monitor."""


@dataclass(frozen=True)
class Addresses:
    """The addresses of INIT the engine connects to."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    coordinator_input: str | None = None
    coordinator_output: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "outputs": list(self.outputs),
                "coordinator_input": self.coordinator_input, "coordinator_output": self.coordinator_output}


def _str_list(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RewriteError(f"addresses.{key} is not a list of strings")
    return tuple(value)


def parse_init(frame: bytes) -> tuple[dict[str, Any], Addresses]:
    """The INIT map and the addresses in it. Raises :class:`RewriteError`."""
    try:
        doc = decode_any(frame)
    except ProtocolError as exc:
        raise RewriteError(f"INIT does not decode: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("addresses"), dict):
        raise RewriteError("INIT is not a map with an 'addresses' map")
    a = doc["addresses"]
    inputs, outputs = _str_list(a.get("inputs"), "inputs"), _str_list(a.get("outputs"), "outputs")
    if len(inputs) != len(outputs):
        raise RewriteError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    coord = []
    for key in ("coordinator_input", "coordinator_output"):
        v = a.get(key)
        if v is not None and not isinstance(v, str):
            raise RewriteError(f"addresses.{key} is not a string or nil")
        coord.append(v)
    if (coord[0] is None) != (coord[1] is None):
        raise RewriteError("only one of the coordinator addresses is set")
    return doc, Addresses(inputs, outputs, coord[0], coord[1])


def rewrite_init(doc: dict[str, Any], new: Addresses) -> bytes:
    """``doc`` re-encoded with ``new`` in place of its addresses (same key order)."""
    addresses = dict(doc["addresses"])
    addresses["inputs"] = list(new.inputs)
    addresses["outputs"] = list(new.outputs)
    if "coordinator_input" in addresses or new.coordinator_input is not None:
        addresses["coordinator_input"] = new.coordinator_input
    if "coordinator_output" in addresses or new.coordinator_output is not None:
        addresses["coordinator_output"] = new.coordinator_output
    return msgspec.msgpack.encode({**doc, "addresses": addresses})


READY_COORDINATOR_KEYS = ("coordinator_input_address", "coordinator_output_address")


def restore_ready_response(frame: bytes, originals: dict[str, str]) -> bytes | None:
    """``frame`` (a ready payload) with relay addresses replaced by ``originals[relay]``;
    ``None`` when nothing needs replacing (or the payload is not a map: forward it as is)."""
    try:
        doc = decode_any(frame)
    except ProtocolError:
        return None
    if not isinstance(doc, dict):
        return None
    changed = {k: originals[doc[k]] for k in READY_COORDINATOR_KEYS
               if isinstance(doc.get(k), str) and doc[k] in originals}
    if not changed:
        return None
    return msgspec.msgpack.encode({**doc, **changed})
