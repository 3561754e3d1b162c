"""Each side's vLLM release: what the monitor decodes a side's messages with, and where the
other side's release reads them differently.

``ecp monitor --vllm R`` names the release of both sides; ``--frontend-vllm R`` and
``--engine-vllm R`` name one side's (R: a shipped release, a layout file, a vLLM tree, or
``auto``). Without them both sides speak the release of :mod:`ecp.spec`.

:class:`ReleaseValidator` wraps the validator the monitor was given:

* every message is judged as its *sender's* release writes it: by the wrapped validator
  (the protocol machines, by default) while both sides speak the release it was built
  for (:func:`judging`: the one both sides were given, through
  :func:`ecp.spec.profile.wire_codec`), otherwise by the sender's profile codec
  (decoding only: the machines speak one release at a time, and once a side speaks
  another they are not fed again);
* a message that the *receiver's* release would refuse is a finding naming the
  ``ecp spec diff`` rule behind it and the message it shows in
  (:class:`ecp.spec.profile.cross.Crossing`): "DIFF-052 profile arguments: ...",
  "DIFF-051 pause_generation: not in vLLM 0.32 ...";
* each side's traffic is fingerprinted (:mod:`ecp.spec.profile.fingerprint`); a side
  given as ``auto`` speaks the newest release that fits its traffic best (an engine's
  ready payload names its version; a frontend's traffic tells less), and a side given
  a release whose traffic fits another better gets a mismatch line in the report.

:meth:`ReleaseValidator.release_report` is the report's ``release`` object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ecp.spec.profile import Profile, resolve_profile, shipped_profile
from ecp.spec.profile.cross import Crossing
from ecp.spec.profile.fingerprint import Fingerprint

from ..release import UNDER_TEST
from .observed import HANDSHAKE, INPUT, OUTPUT, COORDINATOR_OUTPUT, TO_ENGINE, Observed
from .validator import CONTROL_KINDS, SPEC_DIRECTION, CodecValidator, Finding, Validator, Verdict, clause_level

AUTO = "auto"
#: output messages fingerprinted at most (their shape repeats); utility replies always are
FINGERPRINTED_OUTPUTS = 64
_ADD, _UTILITY = b"\x00", b"\x03"


@dataclass
class Side:
    """One side of the pairing: ``frontend`` or ``engine``."""

    role: str
    #: what the command line named (``0.32``, a path, ``auto``), or ``None``: the default
    reference: str | None
    profile: Profile
    fingerprint: Fingerprint = field(default_factory=Fingerprint)
    outputs_seen: int = 0
    #: facts the fingerprint held when an ``auto`` side last chose its release
    facts_seen: int = 0

    @property
    def chosen_by(self) -> str:
        return "default" if self.reference is None else "traffic" if self.reference == AUTO else "option"

    def to_json(self) -> dict[str, Any]:
        verdict = self.fingerprint.verdict()
        under_test = None if self.reference == AUTO else self.profile.release
        mismatch = verdict.sentence(peer=self.role, under_test=under_test,
                                    advice=f"rerun with --{self.role}-vllm {{release}}") if under_test else None
        return {"release": self.profile.release, "vllm_version": self.profile.vllm_version,
                "layout": self.profile.layout.name, "reference": self.reference, "chosen_by": self.chosen_by,
                "fits": verdict.best, "facts": verdict.facts, "mismatch": mismatch}


def resolve_side(role: str, reference: str | None) -> Side:
    """The side a command-line reference names (raises ``LayoutError`` for one that names none)."""
    if reference is None or reference == AUTO:
        return Side(role, reference, shipped_profile(UNDER_TEST))
    return Side(role, reference, resolve_profile(reference))


def judging(frontend: Side, engine: Side) -> Profile | None:
    """The release the rule-checking validator is built for: the one both sides were given,
    when they were given the same one and it is not :mod:`ecp.spec`'s own (``None``: that)."""
    same = frontend.profile.layout == engine.profile.layout
    if not same or frontend.profile.layout == shipped_profile(UNDER_TEST).layout:
        return None
    return frontend.profile


class ReleaseValidator:
    """See the module docstring. ``inner`` judges while both sides speak ``judged`` (the
    release of :mod:`ecp.spec` when ``None``)."""

    def __init__(self, inner: Validator, frontend: Side, engine: Side, judged: Profile | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.frontend, self.engine = frontend, engine
        self._judged = judged or shipped_profile(UNDER_TEST)
        self._inner_on = self._both_under_test()
        self._codecs: dict[str, CodecValidator] = {}
        self._crossings: dict[tuple[str, str, str], Crossing] = {}
        #: (code, shows_in) -> [count, first text], in the order first seen
        self.cross: dict[tuple[str | None, str], list[Any]] = {}
        for side in (frontend, engine):
            side.fingerprint.profiles()  # built now, not inside the first message's relay time

    def _both_under_test(self) -> bool:
        return all(s.profile.layout == self._judged.layout for s in (self.frontend, self.engine))

    @property
    def judged_by(self) -> str:
        return self.inner.name if self._inner_on else "profile codecs"

    def _codec(self, profile: Profile) -> CodecValidator:
        key = profile.layout.name + profile.vllm_version
        if key not in self._codecs:
            self._codecs[key] = CodecValidator(decode=profile.codec.decode_frames)
        return self._codecs[key]

    def _crossing(self, sender: Side, receiver: Side) -> Crossing:
        key = (sender.profile.layout.name + sender.profile.vllm_version,
               receiver.profile.layout.name + receiver.profile.vllm_version, sender.role)
        if key not in self._crossings:
            self._crossings[key] = Crossing(sender.profile, receiver.profile, sender.role)
        return self._crossings[key]

    # ------------------------------------------------------------------ Validator
    def feed(self, msg: Observed) -> Verdict:
        sender, receiver = (self.frontend, self.engine) if msg.direction == TO_ENGINE else (self.engine,
                                                                                              self.frontend)
        if self._inner_on and not self._both_under_test():
            self._inner_on = False  # a side turned out to speak another release: the machines stop here
        verdict = self.inner.feed(msg) if self._inner_on else self._codec(sender.profile).feed(msg)
        if verdict.kind in CONTROL_KINDS:
            return verdict
        self._fingerprint(sender, msg, verdict)
        direction = SPEC_DIRECTION.get((msg.socket, msg.direction))
        if verdict.findings or direction is None or sender.profile.layout == receiver.profile.layout:
            return verdict
        crossed = self._crossing(sender, receiver).check(msg.frames, direction)
        if not crossed:
            return verdict
        found = []
        for cf in crossed:
            entry = self.cross.setdefault((cf.code, cf.shows_in), [0, str(cf)])
            entry[0] += 1
            found.append(Finding(cf.clause, clause_level(cf.clause), str(cf), None,
                                 {**cf.to_dict(), "sender": f"{sender.role} {sender.profile.label}",
                                  "receiver": f"{receiver.role} {receiver.profile.label}"}))
        return Verdict(verdict.kind, verdict.findings + tuple(found), verdict.message)

    def peer_gone(self, rank: int | None) -> list[Finding]:
        return self.inner.peer_gone(rank) if self._inner_on else []

    def finish(self) -> list[Finding]:
        return self.inner.finish() if self._inner_on else []

    # ------------------------------------------------------------------ fingerprints
    def _fingerprint(self, sender: Side, msg: Observed, verdict: Verdict) -> None:
        frames = msg.frames
        if msg.direction == TO_ENGINE:
            if msg.socket == INPUT and frames[:1] in ((_ADD,), (_UTILITY,)):
                self.frontend.fingerprint.observe(frames, "input")
                if frames[0] == _UTILITY:  # the engine's reply names the method by this call id
                    self.engine.fingerprint.observe(frames, "input")
        elif msg.socket == HANDSHAKE:
            self.engine.fingerprint.observe(frames, "handshake")
        elif msg.socket == INPUT:
            self.engine.fingerprint.observe(frames, "ready")
        elif msg.socket in (OUTPUT, COORDINATOR_OUTPUT):
            sender.outputs_seen += 1
            utility = getattr(verdict.message, "utility_output", None) is not None
            if utility or sender.outputs_seen <= FINGERPRINTED_OUTPUTS:
                self.engine.fingerprint.observe(frames, "output")
        self._follow(self.frontend)
        self._follow(self.engine)

    def _follow(self, side: Side) -> None:
        """An ``auto`` side speaks the newest release its traffic fits best so far."""
        if side.reference != AUTO or len(side.fingerprint) == side.facts_seen:
            return
        side.facts_seen = len(side.fingerprint)
        best = side.fingerprint.verdict().release
        if best is not None and best != side.profile.release:
            side.profile = shipped_profile(best)

    # ------------------------------------------------------------------ report
    def release_report(self) -> dict[str, Any]:
        """The report's ``release`` object: each side's release and fingerprint, and every
        cross-release finding by rule and message (with its count and first wording)."""
        return {"under_test": UNDER_TEST, "judged_by": self.judged_by,
                "frontend": self.frontend.to_json(), "engine": self.engine.to_json(),
                "cross": [{"code": code, "shows_in": shows_in, "count": n, "first": text}
                          for (code, shows_in), (n, text) in self.cross.items()]}

    def mismatch_lines(self) -> list[str]:
        """The report's first lines: a side whose traffic fits another release better."""
        return [m for m in (self.frontend.to_json()["mismatch"], self.engine.to_json()["mismatch"]) if m]
