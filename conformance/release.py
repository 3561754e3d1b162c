"""Which vLLM release the peer under test speaks, told from the frames of a conformance run.

The suite is written for one release (:data:`UNDER_TEST`, the release of :mod:`ecp.spec`).
A peer of another release fails cases for reasons that say nothing about it ("EngineCoreOutput
has 18 elements, expected all 19"), so every run fingerprints the peer's traffic
(:mod:`ecp.spec.profile.fingerprint`) and the report's first line names the release it fits
when that is not the one under test (:func:`release_line`).

:class:`ReleaseWatch` is the transcript's observer (``Transcript.observer``): it sees every
frame the harness records and feeds the fingerprint only what the peer sent, plus the
harness's own UTILITY calls in the engine role (their call ids tell which method a reply
answers). What it learned goes to the runner as :meth:`ReleaseWatch.to_dict`.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Sequence

from ecp.spec import VLLM_VERSION
from ecp.spec.profile.fingerprint import Fingerprint, Verdict

#: the release the suite's cases and codec speak
UNDER_TEST = ".".join(VLLM_VERSION.split(".")[:2])
#: frames larger than this are not fingerprinted (their shape is seen in smaller ones; a flood
#: of large frames must not cost the harness a second decode each)
MAX_FRAME_BYTES = 1 << 20
#: "input[0]", "engine1/input[0]", "engine0/handshake": the socket part of a transcript channel
_CHANNEL = re.compile(r"^(?:engine\d+/)?([a-z_]+)")
_UTILITY = b"\x03"
#: the transcript channel of the frontend's ``GET /version`` answer (its ``version``, one frame)
VERSION_CHANNEL = "http/version"


class ReleaseWatch:
    """Feeds a :class:`Fingerprint` from a run's transcript (see the module docstring).

    ``role`` is the role under test: ``engine`` (the peer is an engine: its handshake
    messages, ready payloads and outputs count) or ``frontend`` (the peer is a frontend:
    the inputs it sent the harness's engines count)."""

    def __init__(self, role: str, under_test: str = "", profile: Any = None) -> None:
        self.role = role
        #: the release the run judges the peer as (``--vllm``; the suite's own by default)
        self.under_test = under_test or UNDER_TEST
        # the release under test is a candidate whatever it is (a layout file, a wheel, a checkout)
        self.fingerprint = Fingerprint(under_test=profile)
        # build the releases' profiles now, not inside the first frame a case records (a cost
        # there would be taken for the peer's answer time, which sets the case budgets)
        self.fingerprint.profiles()
        self._lock = threading.Lock()  # frontend-role engines record from their own thread

    def observe(self, direction: str, channel: str, frames: Sequence[bytes]) -> None:
        """One frame set as the transcript records it (``sent`` by the harness, ``recv`` from the
        peer); never raises: what cannot be read is left to the cases."""
        if channel == VERSION_CHANNEL:
            if self.role == "frontend" and len(frames) == 1 and len(frames[0]) < 64:
                with self._lock:
                    self.fingerprint.observe_version(bytes(frames[0]).decode("utf-8", "replace"))
            return
        m = _CHANNEL.match(channel)
        if m is None or any(len(f) > MAX_FRAME_BYTES for f in frames):
            return
        socket = m.group(1)
        try:
            with self._lock:
                self._observe(direction, socket, [bytes(f) for f in frames])
        except Exception:  # noqa: BLE001 - a fingerprint never breaks a case (e.g. msgpack nested too deep)
            pass

    def _observe(self, direction: str, socket: str, frames: list[bytes]) -> None:
        if self.role == "engine":
            self._engine_role(direction, socket, frames)
        elif direction == "recv" and socket == "input":
            self.fingerprint.observe(frames, "input")

    def _engine_role(self, direction: str, socket: str, frames: list[bytes]) -> None:
        fp = self.fingerprint
        if direction == "sent":
            # the harness's own UTILITY calls: the reply's call id names the method it answers
            if socket == "input" and frames[:1] == [_UTILITY]:
                fp.observe(frames, "input")
        elif direction != "recv":
            return
        elif socket == "handshake" and len(frames) == 2:  # [identity, HELLO or READY]
            fp.observe(frames[1:], "handshake")
        elif socket == "input" and len(frames) == 2:  # [identity, ready payload]: a registration
            fp.observe(frames[1:], "ready")
        elif socket in ("output", "coordinator_output"):
            fp.observe(frames, "output")

    def to_dict(self) -> dict[str, Any]:
        """The verdict as the runner receives it: ``best`` (the releases that fit most facts, oldest
        first) and ``facts`` (each fact -> the releases it fits)."""
        with self._lock:
            verdict = self.fingerprint.verdict()
        return {"best": verdict.best, "facts": verdict.facts, "under_test": self.under_test}


def mismatch_line(data: dict[str, Any] | None, role: str, under_test: str | None = None) -> str | None:
    """Which release the peer speaks when it is not the one under test ("this engine speaks vLLM 0.32
    (EngineCoreOutput has 18 elements; no pause_generation), not 0.33: ..."); ``None`` when the
    traffic fits ``under_test`` as well as any release, or told nothing."""
    if not data:
        return None
    under_test = under_test or data.get("under_test") or UNDER_TEST
    # the harness speaks a chosen release, or (frontend role) its engines speak any release: the flag is the advice
    if data.get("how") is not None or role == "frontend":
        advice = "rerun with --vllm {release}"
    else:
        advice = f"this suite judges vLLM {under_test}; `ecp decode --vllm {{release}}` reads the peer's frames"
    return Verdict(list(data.get("best", [])), dict(data.get("facts", {}))).sentence(
        peer=role, under_test=under_test, advice=advice)


def release_line(data: dict[str, Any] | None, role: str, under_test: str | None = None) -> str | None:
    """The report's first line(s): the release under test where one was chosen (``--vllm 0.32``, or
    ``auto``: "judged as vLLM 0.32 (auto: the ready payload says vllm_version 0.32.0 ...)"), then
    :func:`mismatch_line`; ``None`` when there is nothing to say."""
    if not data:
        return None
    under_test = under_test or data.get("under_test") or UNDER_TEST
    how = data.get("how")
    named = how is not None and (under_test != UNDER_TEST or how.startswith("auto"))
    lines = [f"judged as vLLM {under_test} ({how})"] if named else []
    mismatch = mismatch_line(data, role, under_test)
    return "\n".join(lines + ([mismatch] if mismatch else [])) or None


def release_report(data: dict[str, Any] | None, role: str, under_test: str | None = None) -> dict[str, Any]:
    """The ``release`` field of the JSON report."""
    data = data or {}
    under_test = under_test or data.get("under_test") or UNDER_TEST
    return {"under_test": under_test, "how": data.get("how"), "fits": list(data.get("best", [])),
            "facts": dict(data.get("facts", {})), "mismatch": mismatch_line(data, role, under_test)}
