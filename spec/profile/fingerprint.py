"""Which vLLM release a peer speaks, from its traffic.

A :class:`Fingerprint` is fed the frames a tool saw (:meth:`Fingerprint.observe`)
and keeps release-independent facts about them: array lengths (a sender
always writes every element of an array message, ``ECP-FRAME-3``), the keys of
the ready payload (a dataclass: every key is written), the keys of
``SamplingParams`` and READY (a subset of the release's), the UTILITY methods
a peer answered or did not know (``'EngineCoreProc' object has no attribute
'pause_generation'``) and the ready payload's ``vllm_version``. Each fact is
checked against every shipped layout; the releases that fit the most facts win
(:meth:`Fingerprint.verdict`).

A receiver of a verdict should name the release the traffic fits when it is
not the one under test, with the facts that tell them apart
(:meth:`Verdict.sentence`): "this engine speaks vLLM 0.32 (EngineCoreOutput has
18 elements; no pause_generation), not 0.33: rerun with --vllm 0.32".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import msgspec

from ..layout.model import Layout
from .model import Profile
from .resolve import shipped_profile, shipped_releases

#: ``failure_message`` of a call to a method the engine does not have (vLLM's getattr error)
_NO_METHOD = re.compile(r"object has no attribute '([A-Za-z_][A-Za-z0-9_]*)'")
_VERSION = re.compile(r"(\d+)\.(\d+)")


def _release_of_version(version: str) -> str | None:
    m = _VERSION.match(version)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _array(name: str, length: int) -> Callable[[Layout], bool]:
    def fits(layout: Layout) -> bool:
        msg = layout.messages.get(name)
        return msg is not None and msg.encoding == "array" and len(msg.fields) == length
    return fits


def _keys(name: str, keys: frozenset[str], exact: bool) -> Callable[[Layout], bool]:
    def fits(layout: Layout) -> bool:
        msg = layout.messages.get(name)
        if msg is None or msg.encoding != "map":
            return False
        names = {f.name for f in msg.fields} | ({msg.tag[0]} if msg.tag else set())
        return keys == names if exact else keys <= names
    return fits


def _index(name: str, field_name: str, layout: Layout) -> int | None:
    msg = layout.messages.get(name)
    f = msg.field(field_name) if msg is not None else None
    return None if f is None else f.index


def _order(release: str) -> tuple:
    """Releases by version (``0.9`` before ``0.21``); one named by a commit comes after them all."""
    parts = release.split(".")
    return (0, tuple(int(p) for p in parts)) if all(p.isdigit() for p in parts) else (1, (), release)


def _weight(fact: str) -> int:
    """How telling a fact is, for the order of a sentence (stable sort: ties in the order seen)."""
    if fact.endswith(" elements"):
        return 0
    if fact.startswith(("no ", "answers ")):
        return 1
    return 2 if fact.startswith("vllm_version ") else 3


@dataclass
class Verdict:
    """The releases that fit the most facts (``best``, oldest first), and every fact with
    the releases it fits."""

    best: list[str]
    facts: dict[str, list[str]]

    @property
    def release(self) -> str | None:
        """The newest of the best: the one to rerun with."""
        return self.best[-1] if self.best else None

    def fits(self, release: str) -> bool:
        """Whether ``release`` fits as many facts as the best do."""
        return release in self.best

    def against(self, release: str) -> list[str]:
        """The facts the best release fits and ``release`` does not: array lengths first, then
        UTILITY methods, the announced version, and keys."""
        best = self.release
        return sorted((fact for fact, rel in self.facts.items() if best in rel and release not in rel),
                      key=_weight)

    def sentence(self, peer: str = "engine", under_test: str | None = None, limit: int = 3,
                 advice: str = "rerun with --vllm {release}") -> str | None:
        """What a report's first lines say: ``None`` when there are no facts, or when
        ``under_test`` fits the traffic as well as any release. ``advice`` ends the sentence
        (``{release}`` is the best-fitting release): what the reader's tool can do about it."""
        if not self.best or (under_test is not None and self.fits(under_test)):
            return None
        names = self.best if len(self.best) <= 3 else [self.best[0], "...", self.best[-1]]
        speaks = "vLLM " + " or ".join(names)
        if under_test is None:
            # the facts that narrow it down: those some release does not fit
            every = len({r for rel in self.facts.values() for r in rel} | set(self.best))
            shown = sorted((f for f, rel in self.facts.items() if self.release in rel and len(rel) < every),
                           key=_weight)[:limit]
            return f"this {peer} speaks {speaks}" + (f" ({'; '.join(shown)})" if shown else "")
        reasons = self.against(under_test)[:limit]
        return (f"this {peer} speaks {speaks} ({'; '.join(reasons)}), not {under_test}: "
                + advice.format(release=self.release))


@dataclass
class Fingerprint:
    """Facts gathered from traffic (see the module docstring); ``releases`` are the
    candidates (default: every shipped release). ``under_test``, the release a tool judges
    or decodes the peer as (a layout file, a wheel, a checkout: any release), is a candidate
    too, so a verdict names another release only when that one fits more facts."""

    releases: Sequence[str] = field(default_factory=shipped_releases)
    under_test: Profile | None = None
    _facts: dict[str, Callable[[Layout], bool]] = field(default_factory=dict)
    _calls: dict[int, str] = field(default_factory=dict)

    def profiles(self) -> list[Profile]:
        """The candidate releases' profiles, oldest first (shipped ones built once per process)."""
        shipped = [shipped_profile(r) for r in self.releases]
        extra = self.under_test
        if extra is None or extra.release in self.releases:
            return shipped
        return sorted([*shipped, extra], key=lambda p: _order(p.release))

    def _newest(self) -> Layout:
        return self.profiles()[-1].layout

    def __len__(self) -> int:
        """How many distinct facts the traffic gave so far (a verdict changes only when this grows)."""
        return len(self._facts)

    def add(self, fact: str, fits: Callable[[Layout], bool]) -> None:
        """Record one fact: its wording and which layouts it fits."""
        self._facts.setdefault(fact, fits)

    # ------------------------------------------------------------------ observations
    def observe(self, frames: Sequence[bytes], direction: str) -> None:
        """Frames as a tool captured them: ``input`` (``[type, payload, *aux]``), ``output``,
        or one handshake-socket map (``handshake``, ``init``, ``ready``: told apart by their
        keys); anything it cannot read untyped is skipped."""
        try:
            if direction == "input" and len(frames) >= 2:
                self.observe_input(bytes(frames[0]), _untyped(frames[1]))
            elif direction == "output" and frames and bytes(frames[0]) != b"ENGINE_CORE_DEAD":
                self.observe_outputs(_untyped(frames[0]))
            elif direction in ("handshake", "init", "ready") and len(frames) == 1 and len(frames[0]):
                value = _untyped(frames[0])  # one map: told apart by its keys
                if isinstance(value, dict) and "status" in value:
                    self.observe_handshake(value)
                elif isinstance(value, dict) and "max_model_len" in value:
                    self.observe_ready_payload(value)
        except (msgspec.DecodeError, ValueError):
            pass  # not msgpack: the decoder reports it; nothing to learn here

    def observe_input(self, type_byte: bytes, value: Any) -> None:
        newest = self._newest()
        if type_byte == b"\x00" and isinstance(value, list):
            self.add(f"EngineCoreRequest has {len(value)} elements", _array("EngineCoreRequest", len(value)))
            lora = _index("EngineCoreRequest", "lora_request", newest)
            if lora is not None and lora < len(value) and isinstance(value[lora], list):
                n = len(value[lora])
                self.add(f"LoRARequest has {n} elements", _array("LoRARequest", n))
            sp = _index("EngineCoreRequest", "sampling_params", newest)
            if sp is not None and sp < len(value) and isinstance(value[sp], dict):
                keys = frozenset(k for k in value[sp] if isinstance(k, str))
                unknown = sorted(keys - {f.name for f in newest.messages["SamplingParams"].fields})
                text = (f"SamplingParams keys {', '.join(unknown)}" if unknown
                        else f"SamplingParams has {len(keys)} of its keys")
                self.add(text, _keys("SamplingParams", keys, exact=False))
        elif type_byte == b"\x03" and isinstance(value, list) and len(value) >= 3:
            call_id, method = value[1], value[2]
            if isinstance(call_id, int) and isinstance(method, str):
                self._calls[call_id] = method

    def observe_outputs(self, value: Any) -> None:
        if not isinstance(value, list):
            return
        newest = self._newest()
        self.add(f"EngineCoreOutputs has {len(value)} elements", _array("EngineCoreOutputs", len(value)))
        at = _index("EngineCoreOutputs", "outputs", newest)
        if at is not None and at < len(value) and isinstance(value[at], list):
            for item in value[at]:
                if isinstance(item, list):
                    self.add(f"EngineCoreOutput has {len(item)} elements", _array("EngineCoreOutput", len(item)))
        at = _index("EngineCoreOutputs", "utility_output", newest)
        if at is not None and at < len(value) and isinstance(value[at], list) and len(value[at]) >= 2:
            call_id, failure = value[at][0], value[at][1]
            method = self._calls.pop(call_id, None) if isinstance(call_id, int) else None
            missing = _NO_METHOD.search(failure) if isinstance(failure, str) else None
            if missing:
                self.observe_utility(missing.group(1), answered=False)
            elif method is not None and failure is None:
                self.observe_utility(method, answered=True)

    def observe_utility(self, method: str, answered: bool) -> None:
        """A UTILITY call the peer answered, or refused as a method it does not have."""
        if answered:
            self.add(f"answers {method}", lambda layout: method in layout.utility_methods)
        else:
            self.add(f"no {method}", lambda layout: method not in layout.utility_methods)

    def observe_ready_payload(self, value: Any) -> None:
        if not isinstance(value, dict):
            return
        keys = frozenset(k for k in value if isinstance(k, str))
        newest = {f.name for f in self._newest().messages["EngineCoreReadyResponse"].fields}
        missing = sorted(newest - keys)
        text = (f"ready payload has {len(keys)} keys" + (f", no {', '.join(missing[:2])}"
                                                         + (" ..." if len(missing) > 2 else "") if missing else ""))
        self.add(text, _keys("EngineCoreReadyResponse", keys, exact=True))
        version = value.get("vllm_version")
        if isinstance(version, str) and _release_of_version(version):
            self.observe_version(version)

    def observe_handshake(self, value: Any) -> None:
        if isinstance(value, dict) and value.get("status") == "READY":
            keys = frozenset(k for k in value if isinstance(k, str))
            self.add(f"READY keys {', '.join(sorted(keys - {'status'}))}", _keys("Ready", keys, exact=False))

    def observe_version(self, version: str) -> None:
        """The ``vllm_version`` a peer announced (``0.32.0``)."""
        release = _release_of_version(version)
        self.add(f"vllm_version {version}", lambda layout: _release_of_version(layout.vllm_version) == release)

    # ------------------------------------------------------------------ verdict
    def verdict(self) -> Verdict:
        profiles = self.profiles()
        facts = {text: [p.release for p in profiles if fits(p.layout)] for text, fits in self._facts.items()}
        if not facts:
            return Verdict([], {})
        score = {p.release: sum(p.release in rel for rel in facts.values()) for p in profiles}
        top = max(score.values())
        return Verdict([p.release for p in profiles if score[p.release] == top], facts)


def _untyped(frame: bytes) -> Any:
    return msgspec.msgpack.decode(frame, ext_hook=lambda code, data: None)
