"""What a message one release wrote becomes in another: the live counterpart of ``ecp spec compat``.

A :class:`Crossing` holds two profiles, the sender's and the receiver's, and the
``ecp spec diff`` of their layouts (computed once). :meth:`Crossing.check` takes
frames the sender wrote and reads them as a peer of the receiving release does:

* the payload is decoded with the receiver's codec (``ADD`` with its
  ``EngineCoreRequest``, ``outputs`` with its ``EngineCoreOutputs``, the handshake
  messages with its HELLO/READY/INIT/ready payload);
* a UTILITY call must name a method of the receiver's release, with a number of
  arguments that method takes, and every argument typed as a message there
  (``add_lora``'s ``LoRARequest``) must convert to that release's message, as a
  vLLM engine core converts it before the call.

Each way the receiver would refuse the message is a :class:`CrossFinding`: the
``DIFF-nnn`` rule of the change that explains it (``None`` when no diff finding
does), the message it shows in (``UTILITY profile``, ``UTILITY add_lora``,
``ADD``), and what happened, worded as a report line
("DIFF-052 profile arguments: the vLLM 0.33 frontend sends 5, vLLM 0.32 takes 0..4").
A receiver of a finding should report it at the message that carried it:
that is where the pairing of the two releases breaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import msgspec

from ..errors import LocalProtocolError, ProtocolError
from ..layout import types as wt
from .model import Profile

#: frame direction (``ecp.spec.frames``) -> the frame labels a failure there can concern
_DIRECTION_FRAMES = {
    "input": ("ADD", "UTILITY", "START_DP_WAVE"),
    "output": ("outputs",),
    "handshake": ("HELLO", "READY"),
    "init": ("INIT",),
    "ready": ("ready payload",),
}
_UTILITY = b"\x03"


@dataclass(frozen=True)
class CrossFinding:
    """One way the receiving release refuses a message (see the module docstring)."""

    #: the ``ecp spec diff`` rule of the change behind it (``DIFF-052``), or ``None``
    code: str | None
    #: what the change is about, as the diff names it (``utility profile``, ``LoRARequest.load_inplace``)
    subject: str
    #: the message the break shows in: ``UTILITY profile``, ``UTILITY add_lora``, ``ADD``, ``outputs`` ...
    shows_in: str
    #: what happened, without the code
    text: str
    #: the clause of spec/PROTOCOL.md the refusal concerns
    clause: str

    def __str__(self) -> str:
        return f"{self.code or 'no DIFF rule'} {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "subject": self.subject, "shows_in": self.shows_in, "text": self.text,
                "clause": self.clause}


class Crossing:
    """Messages written by ``sender`` (a peer in role ``sender_role``: ``frontend`` or ``engine``),
    read by a peer of ``receiver``'s release."""

    def __init__(self, sender: Profile, receiver: Profile, sender_role: str) -> None:
        if sender_role not in ("frontend", "engine"):
            raise LocalProtocolError(f"sender_role must be frontend or engine, not {sender_role!r}",
                                     clause="ECP-COMPAT-1", got=sender_role)
        self.sender, self.receiver, self.sender_role = sender, receiver, sender_role
        self.same = sender.layout == receiver.layout

    @cached_property
    def diff(self) -> list:
        """``ecp spec diff SENDER RECEIVER``: OLD is what the sender speaks, NEW what the receiver reads."""
        from ..diff.compare import diff_layouts

        return diff_layouts(self.sender.layout, self.receiver.layout)

    def _explaining(self, roots: Sequence[str]) -> list:
        """The diff findings about ``roots`` and the messages they hold (breaking first)."""
        from ..diff.explain import explaining

        return explaining(self.diff, (self.sender.layout, self.receiver.layout), roots)

    def _about_method(self, method: str) -> list:
        from ..diff.explain import about_method

        return about_method(self.diff, method)

    def _finding(self, explained: list, shows_in: str, text: str, clause: str) -> CrossFinding:
        if not explained:
            return CrossFinding(None, shows_in, shows_in, text, clause)
        first = explained[0]
        return CrossFinding(first.rule.id, first.subject, shows_in, text, first.clause or clause)

    @property
    def _peer(self) -> str:
        return f"the {self.sender.label} {self.sender_role}"

    # ------------------------------------------------------------------ checking
    def check(self, frames: Sequence[bytes], direction: str) -> list[CrossFinding]:
        """How the receiver's release reads ``frames`` (captured in ``direction``, as
        :mod:`ecp.spec.frames` names them) that the sender's release wrote: one finding per
        way it refuses them; ``[]`` when it reads them. Never raises on bad frames."""
        if self.same or direction not in _DIRECTION_FRAMES:
            return []
        try:
            message = self.receiver.codec.decode(frames, direction)
        except ProtocolError as exc:
            return [self._refused(frames, direction, exc)]
        if direction == "input" and frames[:1] and bytes(frames[0]) == _UTILITY:
            return self._utility(message)
        return []

    def _refused(self, frames: Sequence[bytes], direction: str, exc: ProtocolError) -> CrossFinding:
        shows_in = self._frame_of(frames, direction)
        root = self.receiver.frames.get(shows_in) or self.sender.frames.get(shows_in)
        explained = self._explaining([root] if root else [])
        text = f"{shows_in} from {self._peer} does not decode in {self.receiver.label}: {_reason(exc)}"
        if explained:
            text = f"{explained[0].subject}: {text}"
        return self._finding(explained, shows_in, text, exc.clause)

    def _frame_of(self, frames: Sequence[bytes], direction: str) -> str:
        if direction == "input" and frames:
            by_byte = {byte: name for name, byte in self.sender.request_types.items()}
            return by_byte.get(bytes(frames[0]), "input")
        return _DIRECTION_FRAMES[direction][0] if direction != "handshake" else "HELLO/READY"

    def _utility(self, call: Any) -> list[CrossFinding]:
        method, args = getattr(call, "method_name", None), getattr(call, "args", None)
        if not isinstance(method, str) or not isinstance(args, (list, tuple)):
            return []
        shows_in = f"UTILITY {method}"
        sig = self.receiver.utility_methods.get(method)
        if sig is None:
            return [self._finding(self._about_method(method), shows_in,
                                  f"{method}: not in {self.receiver.label} (called by {self._peer})", "ECP-UTIL-1")]
        if not sig.accepts(len(args)):
            return [self._finding(self._about_method(method), shows_in,
                                  f"{method} arguments: {self._peer} sends {len(args)}, "
                                  f"{self.receiver.label} takes {sig.arity}", "ECP-UTIL-1")]
        out = []
        for i, (param, value) in enumerate(zip(sig.params or (), args)):
            t = wt.parse(param.type)
            if len(t.members) != 1 or t.members[0].kind != "struct":
                continue  # an engine core converts only arguments typed as one message class
            name = t.members[0].name
            cls = self.receiver.messages.get(name)
            if cls is None:
                continue
            try:
                msgspec.convert(value, cls)
            except (msgspec.ValidationError, TypeError) as exc:
                explained = self._explaining([name])
                subject = explained[0].subject if explained else name
                out.append(self._finding(
                    explained, shows_in,
                    f"{subject}: {method} argument {i + 1} ({param.name}) from {self._peer} is no "
                    f"{name} of {self.receiver.label}: {exc}", "ECP-UTIL-1"))
        return out


def _reason(exc: ProtocolError) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."
