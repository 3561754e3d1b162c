"""Which clause of ``spec/PROTOCOL.md`` a difference between two layouts violates.

Two peers built against different layouts already disagree with
``ECP-COMPAT-1`` (one pinned layout, no negotiation); each finding also names
the clause that defines what changed, so that a reviewer reads the rule the
other release's peers rely on:

* array fields inserted, removed or reordered: ``ECP-FRAME-3`` (array structs,
  full length, in declaration order);
* ``SamplingParams`` and the structs it holds: ``ECP-FRAME-6`` (map structs);
* anything else inside a payload: the payload's clause (``ECP-HS-1`` HELLO,
  ``ECP-HS-2`` INIT, ``ECP-HS-4`` ready payload, ``ECP-HS-5`` READY,
  ``ECP-REQ-1`` ADD, ``ECP-UTIL-1`` UTILITY, ``ECP-DP-4`` START_DP_WAVE,
  ``ECP-FRAME-2`` outputs);
* ``FinishReason``: ``ECP-OUT-4``; request-type bytes: ``ECP-FRAME-1``;
  UTILITY methods and their arguments: ``ECP-UTIL-1``; their results:
  ``ECP-UTIL-9``.
"""

from __future__ import annotations

import re

from ..layout.model import Layout

PINNED = "ECP-COMPAT-1"
FRAME_CLAUSES = {
    "HELLO": "ECP-HS-1", "INIT": "ECP-HS-2", "ready payload": "ECP-HS-4", "READY": "ECP-HS-5",
    "ADD": "ECP-REQ-1", "UTILITY": "ECP-UTIL-1", "START_DP_WAVE": "ECP-DP-4", "outputs": "ECP-FRAME-2",
}
_ARRAY_RULES = {"DIFF-012", "DIFF-013", "DIFF-014", "DIFF-060", "DIFF-061"}
_RULE_CLAUSES = {
    "DIFF-040": "ECP-FRAME-1", "DIFF-041": "ECP-FRAME-1", "DIFF-042": "ECP-FRAME-1", "DIFF-043": "ECP-FRAME-1",
    "DIFF-050": "ECP-UTIL-1", "DIFF-051": "ECP-UTIL-1", "DIFF-052": "ECP-UTIL-1", "DIFF-053": "ECP-UTIL-1",
    "DIFF-054": "ECP-UTIL-9", "DIFF-055": "ECP-UTIL-9", "DIFF-056": "ECP-UTIL-9",
    "DIFF-065": "ECP-FRAME-1", "DIFF-066": "ECP-UTIL-1", "DIFF-067": "ECP-UTIL-1", "DIFF-069": "ECP-COMPAT-2",
}
_ENUM_CLAUSES = {"FinishReason": "ECP-OUT-4"}
_STRUCT_REF = re.compile(r"struct:(\w+)")


def reachable(layout: Layout, root: str, seen: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """``root`` and every message its fields hold, nested (breadth first), except those in ``seen``."""
    out: dict[str, None] = {}  # insertion-ordered set
    queue = [root]
    while queue:
        current = queue.pop(0)
        if current in seen or current in out or current not in layout.messages:
            continue
        out[current] = None
        for f in layout.messages[current].fields:
            queue += _STRUCT_REF.findall(f.type)
    return list(out)


def frames_reaching(layout: Layout) -> dict[str, str]:
    """Message name -> the frame of the first payload (in layout order) that carries it."""
    out: dict[str, str] = {}
    for name, msg in layout.messages.items():
        if msg.frame is not None:
            out.update((m, msg.frame) for m in reachable(layout, name, out.keys()))
    return out


def clause_for(rule_id: str, subject: str, old: Layout, new: Layout) -> str:
    """The clause a finding of ``rule_id`` about ``subject`` violates."""
    if rule_id in _RULE_CLAUSES:
        return _RULE_CLAUSES[rule_id]
    if subject.startswith("enum "):
        return _ENUM_CLAUSES.get(subject[5:].split(".")[0], PINNED)
    message = subject.split(".")[0]
    msg = new.messages.get(message) or old.messages.get(message)
    if msg is not None and msg.encoding == "array" and rule_id in _ARRAY_RULES:
        return "ECP-FRAME-3"
    frame = frames_reaching(new).get(message) or frames_reaching(old).get(message)
    if message == "SamplingParams" or (frame == "ADD" and msg is not None and msg.encoding == "map"
                                       and message != "EngineCoreRequest"):
        return "ECP-FRAME-6" if message == "SamplingParams" else FRAME_CLAUSES["ADD"]
    return FRAME_CLAUSES.get(frame or "", PINNED)
