"""What a session is: a role, a topology and a list of steps, all plain JSON.

Steps are dicts with an ``op``. The engine role's (the executor in :mod:`.execute` gives each its
meaning):

* ``add``: ``ref`` (the request's number in the session), ``engine``, ``client``, ``max_tokens``,
  ``prompt_len``, ``id_len``, ``temperature``, ``logprobs``, ``prompt_logprobs``,
  ``abort_immediately``, ``wave`` (``current_wave`` stamped on the ADD, or null), ``oversize`` (a
  prompt longer than the engine's ``max_model_len``: an ERROR output is owed);
* ``abort``: ``client``, ``engine`` (where unknown ids go), ``targets`` (refs; -1 is an id never added);
* ``duplicate``: ``ref`` -- an ADD with the id of that request while it is in flight (played only
  right behind that request's own ADD, so that it surely is: ``ECP-REQ-2`` owes an ERROR that
  leaves it running);
* ``call``: ``engine``, ``client``, ``method``, ``args`` (a utility call of the release's table;
  ``refused``: an unknown method or more arguments than the table lists, answered with a failure);
* ``start_wave``: ``engine``, ``wave``, ``exclude`` (a ``wave``, stamped on an ADD or started, counts
  from the wave the peer is in when the session starts, as the harness's protocol machine knows it:
  0 on a fresh launch, so a reproducer replays the same waves);
* ``garbage``: ``engine``, ``client``, ``frames`` (one malformed input message, each frame as hex);
* ``stop``: ``engine``, ``ms`` -- a process fault: SIGSTOP the process of that rank, SIGCONT it
  ``ms`` milliseconds later (:mod:`.processes` says which process runs a rank);
* ``kill``: ``engine`` -- a process fault: SIGKILL the process of that rank; the harness, as a
  frontend, must then see the engine dead and fails closed, so nothing after it is played;
* ``wait``: ``until`` = ``running`` / ``terminal`` (of ``ref``), ``idle`` (every request ended) or
  ``replies`` (every utility call answered) -- the timing choices; steps with no wait between them
  go out as a burst.

The frontend role's (:mod:`.frontend_execute`):

* ``request``: ``ref``, ``api`` (``completions`` / ``chat``), ``stream``, ``max_tokens``,
  ``prompt_len`` (words), ``temperature``, ``logprobs``, ``named`` (an ``X-Request-Id`` header, or
  null; two requests may share one);
* ``request`` may also carry ``pin``: a rank (by number in the session) named in an
  ``X-data-parallel-rank`` header, or null;
* ``drop``: ``ref`` (a stream), ``after`` (``open``: right after its response head; ``first``:
  after its first event) -- the client goes away;
* ``crowd``: ``refs`` (streams), ``after`` -- every one of them still open goes away at once, while
  the frontend's process is stopped, so that it sees them leave in the same instant;
* ``abort``: ``targets`` (streams, by the response id of their first event, that the explicit-abort
  route is given; -1 is an id never sent);
* ``route``: ``route`` (a utility route of :data:`ROUTES`);
* ``wait``: ``until`` = ``first`` / ``end`` (of ``ref``) or ``idle`` (every request that runs to
  its end has ended).

Engine and client numbers are taken modulo the topology's, so a session stays playable when the
shrinker gives it fewer engines or clients.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ROLES = ("engine", "frontend")
#: per role: each op with the keys it cannot do without
REQUIRED: dict[str, dict[str, tuple[str, ...]]] = {
    "engine": {"add": ("ref", "max_tokens", "prompt_len"), "abort": ("targets",), "duplicate": ("ref",),
               "call": ("method",),
               "start_wave": ("wave",), "garbage": ("frames",), "wait": ("until",), "stop": ("ms",),
               "kill": ()},
    "frontend": {"request": ("ref", "api", "stream", "max_tokens"), "drop": ("ref",), "crowd": ("refs",),
                 "abort": ("targets",),
                 "route": ("route",), "wait": ("until",)},
}
OPS = tuple(REQUIRED["engine"])
#: the engine role's process faults
PROCESS_FAULTS = ("stop", "kill")
#: per role: what a wait step may wait for, and those of them that name a request (``ref``)
WAITS = {"engine": ("running", "terminal", "idle", "replies"), "frontend": ("first", "end", "idle")}
WAITS_FOR_REF = ("running", "terminal", "first", "end")
#: the frontend role's utility routes: name -> (method, path, body, whether it is a dev endpoint)
ROUTES: dict[str, tuple[str, str, Any, bool]] = {
    "models": ("GET", "/v1/models", None, False),
    "health": ("GET", "/health", None, False),
    "is_sleeping": ("GET", "/is_sleeping", None, True),
    "reset_prefix_cache": ("POST", "/reset_prefix_cache", None, True),
}


@dataclass(frozen=True)
class Topology:
    """How many engines (DP ranks) and clients a launch has, and whether the harness plays the DP
    coordinator."""

    engines: int = 1
    clients: int = 1
    coordinator: bool = False
    #: frontend role: how the scripted engines behave -- their output form
    #: (``conformance/frontend/output_forms.py``), the delay between token steps, whether they emit
    #: an ABORT output for an aborted request, and after how many tokens longer requests stall until
    #: aborted (None: none stalls)
    form: str = "full"
    delay_ms: int = 0
    abort_outputs: bool = False
    hold: int | None = None
    #: frontend role: the scripted engines end every request that would emit more than this many
    #: tokens with an ERROR output instead (None: they fail nothing)
    error_after: int | None = None


@dataclass
class Session:
    topology: Topology
    steps: list[dict[str, Any]] = field(default_factory=list)
    seed: int | None = None
    role: str = "engine"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "topology": asdict(self.topology), "steps": self.steps, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Session":
        """Raise :class:`ValueError` naming what is wrong when ``data`` is not a session."""
        try:
            topo = Topology(**data["topology"])
            steps = list(data["steps"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a session (topology and steps expected): {exc}") from None
        role = data.get("role", "engine")
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {ROLES}")
        if topo.engines < 1 or topo.clients < 1:
            raise ValueError(f"topology needs at least one engine and one client, got {topo}")
        required, waits = REQUIRED[role], WAITS[role]
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or step.get("op") not in required:
                raise ValueError(f"step {i} is not one of the {role} role's {tuple(required)}: {step!r}")
            missing = [k for k in required[step["op"]] if k not in step]
            if missing:
                raise ValueError(f"step {i} ({step['op']}) lacks {missing}")
            if step["op"] == "wait" and step["until"] not in waits:
                raise ValueError(f"step {i} waits for {step['until']!r}, not one of {waits}")
            if step["op"] == "wait" and step["until"] in WAITS_FOR_REF and "ref" not in step:
                raise ValueError(f"step {i} waits for a request but names none (ref)")
            if step["op"] == "route" and step["route"] not in ROUTES:
                raise ValueError(f"step {i} calls route {step['route']!r}, not one of {tuple(ROUTES)}")
            if step["op"] == "stop" and not (isinstance(step["ms"], int) and 0 < step["ms"] <= 60_000):
                raise ValueError(f"step {i}: ms must be an int from 1 to 60000, got {step['ms']!r}")
            if step["op"] == "garbage":
                try:
                    [bytes.fromhex(f) for f in step["frames"]]
                except (TypeError, ValueError):
                    raise ValueError(f"step {i}: frames must be a list of hex strings") from None
        return cls(topo, steps, data.get("seed"), role)

    def with_steps(self, steps: list[dict[str, Any]]) -> "Session":
        return Session(self.topology, list(steps), self.seed, self.role)

    def with_topology(self, topology: Topology) -> "Session":
        return Session(topology, list(self.steps), self.seed, self.role)


def describe(step: dict[str, Any]) -> str:
    """One line for a report."""
    fields = ", ".join(f"{k}={v!r}" for k, v in step.items() if k != "op")
    return f"{step['op']}({fields})"
