"""What a session is: a topology and a list of steps, both plain JSON.

Steps are dicts with an ``op`` (the executor in :mod:`.execute` gives each its meaning):

* ``add``: ``ref`` (the request's number in the session), ``engine``, ``client``, ``max_tokens``,
  ``prompt_len``, ``id_len``, ``temperature``, ``logprobs``, ``prompt_logprobs``,
  ``abort_immediately``, ``wave`` (``current_wave`` stamped on the ADD, or null), ``oversize`` (a
  prompt longer than the engine's ``max_model_len``: an ERROR output is owed);
* ``abort``: ``client``, ``engine`` (where unknown ids go), ``targets`` (refs; -1 is an id never added);
* ``call``: ``engine``, ``client``, ``method``, ``args`` (a utility call of the release's table);
* ``start_wave``: ``engine``, ``wave``, ``exclude``;
* ``garbage``: ``engine``, ``client``, ``frames`` (one malformed input message, each frame as hex);
* ``wait``: ``until`` = ``running`` / ``terminal`` (of ``ref``), ``idle`` (every request ended) or
  ``replies`` (every utility call answered) -- the timing choices; steps with no wait between them
  go out as a burst.

Engine and client numbers are taken modulo the topology's, so a session stays playable when the
shrinker gives it fewer engines or clients.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OPS = ("add", "abort", "call", "start_wave", "garbage", "wait")
WAITS = ("running", "terminal", "idle", "replies")
#: the keys each op cannot do without
REQUIRED = {"add": ("ref", "max_tokens", "prompt_len"), "abort": ("targets",), "call": ("method",),
            "start_wave": ("wave",), "garbage": ("frames",), "wait": ("until",)}


@dataclass(frozen=True)
class Topology:
    """How many engines (DP ranks) and clients a launch has, and whether the harness plays the DP
    coordinator."""

    engines: int = 1
    clients: int = 1
    coordinator: bool = False


@dataclass
class Session:
    topology: Topology
    steps: list[dict[str, Any]] = field(default_factory=list)
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"topology": asdict(self.topology), "steps": self.steps, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Session":
        """Raise :class:`ValueError` naming what is wrong when ``data`` is not a session."""
        try:
            topo = Topology(**data["topology"])
            steps = list(data["steps"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a session (topology and steps expected): {exc}") from None
        if topo.engines < 1 or topo.clients < 1:
            raise ValueError(f"topology needs at least one engine and one client, got {topo}")
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or step.get("op") not in OPS:
                raise ValueError(f"step {i} is not one of {OPS}: {step!r}")
            missing = [k for k in REQUIRED[step["op"]] if k not in step]
            if missing:
                raise ValueError(f"step {i} ({step['op']}) lacks {missing}")
            if step["op"] == "wait" and step["until"] not in WAITS:
                raise ValueError(f"step {i} waits for {step['until']!r}, not one of {WAITS}")
            if step["op"] == "wait" and step["until"] in ("running", "terminal") and "ref" not in step:
                raise ValueError(f"step {i} waits for a request but names none (ref)")
            if step["op"] == "garbage":
                try:
                    [bytes.fromhex(f) for f in step["frames"]]
                except (TypeError, ValueError):
                    raise ValueError(f"step {i}: frames must be a list of hex strings") from None
        return cls(topo, steps, data.get("seed"))

    def with_steps(self, steps: list[dict[str, Any]]) -> "Session":
        return Session(self.topology, list(steps), self.seed)


def describe(step: dict[str, Any]) -> str:
    """One line for a report."""
    fields = ", ".join(f"{k}={v!r}" for k, v in step.items() if k != "op")
    return f"{step['op']}({fields})"
