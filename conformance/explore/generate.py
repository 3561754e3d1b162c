"""Random legal sessions, drawn from a seed.

The draw follows a small model of the peer (which requests exist, which ranks are paused or
asleep) so that most steps are meaningful; the executor still checks each step against the
state the session really reached and skips what would be illegal there (a shrunk session may
have lost the step that made a later one legal).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import msgspec

from ecp.spec import VLLM_RELEASE
from ecp.spec.machine import SchedulerControl

from .session import Session, Topology

#: the drawn length of a long request: the one an ABORT, a pause or a sleep is meant to find running.
#: Once the explorer knows the engine's pace it plays long requests as long as it takes
#: :data:`LONG_REQUEST_S` (:func:`paced`)
LONG_TOKENS = 1500
MAX_TOKENS = (1, 2, 3, 8, 32, 200, LONG_TOKENS, LONG_TOKENS)
#: how long a long request should run at the engine's pace: an ABORT sent once it runs must find it
#: still running ``ECP-ABORT-2``'s grace later (oracle.ABORT_GRACE_S) with room to spare
LONG_REQUEST_S = 2.0
#: the fewest tokens of a long request, whatever the pace (a duplicate ADD needs one of at least 200)
MIN_LONG_TOKENS = 200
PROMPT_LENS = (1, 4, 17, 300)
#: alternatives per sampled token; with 64 a token's id and logprob rows (65 x 4 bytes) cross the
#: 256-byte aux-frame threshold (ECP-FRAME-8)
LOGPROBS = (None, None, None, 0, 3, 64)
#: 40 and 70 characters: longer than the 32 some frontends cut ids to
ID_LENS = (8, 8, 8, 40, 70)

Args = Callable[[random.Random], list[Any]]

def _pause_args(r: random.Random) -> list[Any]:
    """A pause's arguments: its mode left out, or a mode with or without ``clear_cache``."""
    mode, clear_cache = r.choice((None, "abort", "wait", "keep")), r.choice((None, True, False))
    return [] if mode is None else [mode] if clear_cache is None else [mode, clear_cache]


#: the utility methods of the release's table the explorer calls, each with a draw of valid arguments
#: (methods an engine may not implement are included: answering them with a failure is legal)
UTILITIES: dict[str, Args] = {
    "get_supported_tasks": lambda r: [],
    "reset_mm_cache": lambda r: [],
    "reset_encoder_cache": lambda r: [],
    "is_sleeping": lambda r: [],
    "reset_prefix_cache": lambda r: r.choice([[], [False, False], [True, False]]),
    "is_scheduler_paused": lambda r: [],
    "get_weight_version": lambda r: [],
    "set_weight_version": lambda r: [f"v{r.randrange(100)}"],
    "list_loras": lambda r: [],
    # a pause or sleep sometimes leaves arguments out: the engine applies the table's defaults (mode
    # abort, ECP-UTIL-8); a pause's mode is left out or one of the three, a quarter each
    "pause_generation": _pause_args,
    "pause_scheduler": _pause_args,
    "resume_scheduler": lambda r: [],
    "sleep": lambda r: list(r.choice(([1, "abort"], [1, "wait"], [], [1]))),
    "wake_up": lambda r: [None],
}

#: the calls whose mode decides what becomes of the requests running on their rank
MODE_CALLS = ("sleep", "pause_generation", "pause_scheduler")
#: the calls that change what a rank must answer next: the mode calls and the two that undo them. Half
#: the calls drawn change the rank's state, as far as the draw's model of it allows (a sleeping rank is
#: woken, a paused one resumed, any other sleeps or pauses: undone :data:`UNDO_AFTER` steps later
#: unless a state call comes first); the other half is one of the queries. A
#: query is judged alike in every state, while each state change moves what the ADDs, ABORTs, queries
#: and running requests around it must get. (Drawn uniformly over the 16 methods, two in five state
#: calls undoing what was never done, a pause without arguments or with mode keep was too rare to show
#: within a two-minute budget.)
STATE_CALLS = (*MODE_CALLS, "resume_scheduler", "wake_up")
QUERIES = tuple(m for m in UTILITIES if m not in STATE_CALLS)
STATE_CALL_P = 0.5
#: how many drawn steps after a sleep or pause (and the ADDs behind it) it is undone, unless a state call
#: on its rank comes first
UNDO_AFTER = (1, 2, 3, 4)
#: the share of sleeps and pauses that are followed by an abort_immediately ADD too (an ADD follows each)
ABORT_NOW_AFTER_P = 0.3

#: calls the engine must refuse with a failure (ECP-UTIL-3): an unknown method, more arguments than
#: the method table lists
REFUSED_CALLS: tuple[tuple[str, list[Any]], ...] = (
    ("ecp_no_such_method", [1, "x"]), ("is_sleeping", [1, 2]), ("get_supported_tasks", [True]),
)
#: the call id of a malformed UTILITY whose id is readable (ECP-ROB-1.2: a failure or nothing answers
#: it, never a result), plus the step's index: far from the harness's own call ids
REFUSED_CALL_ID = 0x7EC0_0000

#: malformed input messages (ECP-ROB-1: each is rejected and the engine keeps serving)
#: (frames as hex, the type byte first: vLLM 0.33's; :class:`Speaks` writes them with the release's bytes)
GARBAGE = (
    ["ff", "90"],    # an unknown request type byte
    ["00", "c1"],    # ADD whose payload is not msgpack (0xc1 is never used)
    ["01", "92a161"],  # ABORT with a truncated array
    ["03"],          # UTILITY without its payload frame
)
#: the request type each of vLLM 0.33's type bytes above is
_TYPE_NAMES = {"00": "ADD", "01": "ABORT", "02": "START_DP_WAVE", "03": "UTILITY"}


@dataclass(frozen=True)
class Speaks:
    """What the sessions drawn for one release may contain: only what its peers speak (its profile,
    :class:`ecp.spec.profile.Profile`). A utility method the release lacks is never called, a request
    field it lacks (``abort_immediately``, ``current_wave``) never set, a message it lacks
    (``START_DP_WAVE``) never sent, and type bytes are the release's. What is left out is still drawn
    and then dropped, so the rest of a session is the same whatever the release, and vLLM 0.33's
    sessions are the draws of no profile at all."""

    #: the utility methods of :data:`UTILITIES` the release has
    utilities: frozenset[str]
    #: :data:`REFUSED_CALLS` that an engine of the release refuses (unknown, or surplus arguments)
    refused: tuple[tuple[str, list[Any]], ...]
    abort_immediately: bool
    #: ADDs stamped ``current_wave`` and START_DP_WAVE messages
    waves: bool
    #: request type name -> its byte, as hex
    type_bytes: dict[str, str]

    def frames(self, frames: list[str]) -> list[str]:
        """Malformed frames written with vLLM 0.33's type byte, with the release's."""
        name = _TYPE_NAMES.get(frames[0]) if frames else None
        if name is None or name not in self.type_bytes:
            return list(frames)
        return [self.type_bytes[name], *frames[1:]]


def speaks(profile: Any = None) -> Speaks:
    """What the sessions for ``profile``'s release may contain (``None``: vLLM 0.33, ecp.spec's own)."""
    if profile is None:
        from ecp.spec.profile import shipped_profile

        profile = shipped_profile(VLLM_RELEASE)
    return _speaks(profile)


@lru_cache(maxsize=16)
def _speaks(profile: Any) -> Speaks:
    methods = profile.utility_methods
    refused = tuple((m, args) for m, args in REFUSED_CALLS
                    if m not in methods or not methods[m].accepts(len(args)))
    return Speaks(utilities=frozenset(m for m in UTILITIES if m in methods), refused=refused,
                  abort_immediately=profile.has_field("EngineCoreRequest", "abort_immediately"),
                  waves=profile.has_field("EngineCoreRequest", "current_wave")
                  and "START_DP_WAVE" in profile.request_types,
                  type_bytes={name: b.hex() for name, b in profile.request_types.items()})


#: the shares of a session's drawn steps that are ADDs and ABORTs; calls take the steps up to 0.70 (0.30:
#: half of them state changes, and queries about as frequent as when they were 11 of 16 methods in a
#: share of 0.24), waits the next 0.23, the rest are DP waves and malformed messages. Every session
#: still starts with an ADD, and sleeps, pauses and ABORTs bring ADDs of their own
ADD_P, ABORT_P = 0.28, 0.12

#: the share of sessions given one process fault, and of those the share whose fault is a SIGKILL
PROCESS_FAULT_P = 0.15
KILL_P = 0.3
#: how long a SIGSTOPped rank stays stopped (ms)
STOP_MS = (20, 100, 400, 1500)


def draw(seed: int, max_engines: int = 1, max_steps: int = 24, malformed: bool = True,
         process_faults: bool = True, duplicates: bool = True, profile: Any = None) -> Session:
    """The session of ``seed`` for a peer of ``profile``'s release (:class:`Speaks`; ``None``: vLLM
    0.33) launched with up to ``max_engines`` ranks; without
    ``malformed`` the steps that would send a malformed message wait for every reply instead, and
    without ``duplicates`` no ADD repeats an id in flight (the rest of the session is the same);
    with ``process_faults`` some sessions get one process fault (a SIGSTOP/SIGCONT of one rank, or
    a SIGKILL of one rank), drawn from a stream of its own so the rest of the session is the same
    either way."""
    release = speaks(profile)
    # the release's methods, in the tables' order: for vLLM 0.33 the very tables (the same draws)
    modes = tuple(m for m in MODE_CALLS if m in release.utilities)
    queries = tuple(m for m in QUERIES if m in release.utilities)
    r = random.Random(seed)
    engines = max_engines if max_engines == 1 or r.random() < 0.7 else r.randint(1, max_engines)
    topo = Topology(engines=engines, clients=r.choice((1, 1, 2)), coordinator=engines > 1 and r.random() < 0.5)
    steps: list[dict[str, Any]] = []
    refs = 0
    wave = 0
    #: each rank's sleep/pause state as the drawn calls move the spec's table (the executor keeps the
    #: one the answered calls give, and skips what is illegal there)
    ranks = [SchedulerControl() for _ in range(topo.engines)]
    #: rank -> drawn steps until its sleep or pause is undone (a rank left asleep or paused for the rest
    #: of a session makes every later ADD, wait and ABORT on it void; the epilogue undoes what is left)
    undo_in: dict[int, int] = {}
    for _ in range(r.randint(3, max_steps)):
        for e in [e for e, left in undo_in.items() if left <= 0]:
            del undo_in[e]
            method = "wake_up" if ranks[e].asleep else "resume_scheduler"
            args = UTILITIES[method](r)
            ranks[e].carried_out(method, args, True if method == "wake_up" else None)
            steps.append({"op": "call", "engine": e, "client": r.randrange(topo.clients), "method": method,
                          "args": args})
        undo_in = {e: left - 1 for e, left in undo_in.items()}
        engine, client = r.randrange(topo.engines), r.randrange(topo.clients)
        roll = r.random()
        if roll < ADD_P or not refs:
            if topo.coordinator and r.random() < 0.3:
                wave += r.choice((0, 1, 1, 5))
            steps.append(_add(r, refs, engine, client, topo, wave, release=release))
            refs += 1
        elif roll < ADD_P + ABORT_P:
            pick = r.sample(range(refs), k=min(refs, r.choice((1, 1, 2, 3))))
            if r.random() < 0.5:  # a timing choice: let the request run first (else the ABORT races the ADD)
                steps.append({"op": "wait", "until": "running", "ref": pick[0]})
            if r.random() < 0.2:
                pick.append(-1)
            steps.append({"op": "abort", "client": client, "engine": engine, "targets": pick})
        elif roll < 0.70 and (modes or queries):
            rank = ranks[engine]
            # the change the rank's state allows: undo a sleep or pause, or make one
            if (r.random() < STATE_CALL_P and (modes or rank.asleep or rank.paused)) or not queries:
                method = "wake_up" if rank.asleep else "resume_scheduler" if rank.paused else r.choice(modes)
                undo_in.pop(engine, None)
            else:
                method = r.choice(queries)
            args = UTILITIES[method](r)
            rank.carried_out(method, args, True if method == "wake_up" else None)
            steps.append({"op": "call", "engine": engine, "client": client, "method": method, "args": args})
            # what a paused or sleeping rank does with an ADD: admit, queue or refuse it; and, now and then,
            # with an abort_immediately ADD, which it never refuses (ECP-REJECT-5)
            if method in MODE_CALLS:
                undo_in[engine] = r.choice(UNDO_AFTER)
                steps.append(_add(r, refs, engine, client, topo, 0, abort_immediately=0.0, release=release))
                refs += 1
                if r.random() < ABORT_NOW_AFTER_P and release.abort_immediately:
                    steps.append(_add(r, refs, engine, client, topo, 0, abort_immediately=1.0, release=release))
                    refs += 1
        elif roll < 0.93:
            until = r.choice(("running", "running", "terminal", "terminal", "idle", "replies"))
            step: dict[str, Any] = {"op": "wait", "until": until}
            if until in ("running", "terminal"):
                step["ref"] = r.randrange(refs)
            steps.append(step)
        elif roll < 0.97 and topo.engines > 1 and release.waves:
            wave += 1
            steps.append({"op": "start_wave", "engine": engine, "wave": wave,
                          "exclude": r.choice((None, r.randrange(topo.engines)))})
        else:
            frames = release.frames(r.choice(GARBAGE))  # drawn either way: the rest of the session stays the same
            steps.append({"op": "garbage", "engine": engine, "client": client, "frames": frames} if malformed
                         else {"op": "wait", "until": "replies"})
    _stop_repeats(random.Random(f"stop-repeat-{seed}"), steps, refs)
    _busy_calls(random.Random(f"busy-call-{seed}"), steps)
    _busy_aborts(random.Random(f"busy-abort-{seed}"), steps)
    if "reset_prefix_cache" in release.utilities:
        _idle_reset(random.Random(f"idle-reset-{seed}"), topo, steps)
    _refusals(random.Random(f"refusal-{seed}"), topo, steps, malformed, release)
    if "is_sleeping" in release.utilities:
        _sleep_queries(steps)
    if process_faults:  # (a SIGKILL lands in the last third of the steps)
        _process_fault(random.Random(f"process-fault-{seed}"), topo, steps)
    if duplicates:  # last: nothing comes between an ADD and its duplicate
        _duplicates(random.Random(f"duplicate-{seed}"), steps)
    return Session(topo, steps, seed)


def long_tokens(token_s: float | None) -> int | None:
    """The length of a long request at ``token_s`` seconds per token (None: pace unknown)."""
    if not token_s or token_s <= 0:
        return None
    return max(MIN_LONG_TOKENS, math.ceil(LONG_REQUEST_S / token_s))


def paced(session: Session, tokens: int | None) -> Session:
    """``session`` with its long ADDs (``max_tokens`` :data:`LONG_TOKENS`) ``tokens`` long: a fast engine
    would end a 1,500-token request before an ABORT could find it running past the grace, a slow one
    would spend most of a session on it. The executor still caps a length at the engine's
    ``max_model_len``. The result is concrete: a reproducer written from it replays the same lengths."""
    if tokens is None or tokens == LONG_TOKENS:
        return session
    return session.with_steps([{**st, "max_tokens": tokens} if st["op"] == "add" and st["max_tokens"] == LONG_TOKENS
                               else st for st in session.steps])


#: the share of greedy ADDs that are repeated with one of their own tokens as a stop token
STOP_REPEAT_P = 0.3


def _stop_repeats(r: random.Random, steps: list[dict[str, Any]], refs: int) -> None:
    """Repeat some greedy ADDs (same prompt, same engine) with ``stop_token_ids`` naming the k-th
    token the first one produced: the repeat must end there with STOP and ``stop_reason`` that
    token (ECP-REQ-5), also when that token is its last allowed one. Drawn from a stream of its
    own, so the rest of the session is unchanged."""
    greedy = [i for i, st in enumerate(steps) if st["op"] == "add" and st["temperature"] == 0.0
              and not st["oversize"] and not st["abort_immediately"] and st["max_tokens"] >= 3]
    for i in reversed(greedy):
        if r.random() >= STOP_REPEAT_P:
            continue
        first = steps[i]
        k = r.choice((0, 1, 2))
        repeat = {**first, "ref": refs, "same_prompt_as": first["ref"], "stop_at": k,
                  "max_tokens": r.choice((k + 1, 8, 32)), "logprobs": None, "prompt_logprobs": None, "wave": None}
        refs += 1
        steps.insert(r.randint(i + 1, len(steps)), repeat)


#: the share of long ADDs that are followed, once they run, by an ADD of the same id
DUPLICATE_P = 0.15
#: the share of sessions given one refused message: a refused call, a malformed UTILITY or a malformed
#: ADD, a third each (one message; at a quarter of the sessions and no malformed ADD, an engine that
#: answers a malformed UTILITY with a result went unseen for 16 sessions of seed 7)
REFUSAL_P = 0.75


def _duplicates(r: random.Random, steps: list[dict[str, Any]]) -> None:
    """Right after some long ADDs, an ADD with the same id (ECP-REQ-2: an ERROR answers it, which must
    not list the id as finished, ECP-OUT-5). Drawn from a stream of its own, so the rest of the
    session is unchanged."""
    long = [i for i, st in enumerate(steps) if st["op"] == "add" and st["max_tokens"] >= LONG_TOKENS
            and not st["oversize"] and not st["abort_immediately"]]
    for i in reversed(long):
        if r.random() < DUPLICATE_P:
            ref = steps[i]["ref"]
            steps.insert(i + 1, {"op": "duplicate", "ref": ref})


#: the share of sleeps and pauses that find a long request of their rank and client running
BUSY_CALL_P = 0.8


def _busy_calls(r: random.Random, steps: list[dict[str, Any]]) -> None:
    """Before some sleeps and pauses, a long ADD on the same rank and client and a wait until it runs:
    what the call's mode (given, or left out: abort) does to a running request is then judged
    (ECP-ABORT-9, ECP-UTIL-8). Drawn from a stream of its own, so the rest of the session is unchanged."""
    ref = 1 + max((st["ref"] for st in steps if st["op"] == "add"), default=-1)
    for i in reversed([i for i, st in enumerate(steps) if st["op"] == "call" and st["method"] in MODE_CALLS]):
        if r.random() >= BUSY_CALL_P:
            continue
        call = steps[i]
        add = {"op": "add", "ref": ref, "engine": call["engine"], "client": call["client"], "max_tokens": LONG_TOKENS,
               "prompt_len": r.choice(PROMPT_LENS), "id_len": 8, "temperature": 0.0, "logprobs": None,
               "prompt_logprobs": None, "abort_immediately": False, "wave": None, "oversize": False}
        steps[i:i] = [add, {"op": "wait", "until": "running", "ref": ref}]
        ref += 1


#: the share of ABORTs that first find a long request of their own rank and client running
BUSY_ABORT_P = 0.4


def _busy_aborts(r: random.Random, steps: list[dict[str, Any]]) -> None:
    """Before some ABORTs, a long ADD on the ABORT's rank and client and a wait until it runs, and the
    ABORT names it too: that a running request stops producing once aborted (ECP-ABORT-2) is then
    judged in many sessions, where the draw's own order mostly aborts what already ended or never
    started. Drawn from a stream of its own, so the rest of the session is unchanged."""
    ref = 1 + max((st["ref"] for st in steps if st["op"] == "add"), default=-1)
    for i in reversed([i for i, st in enumerate(steps) if st["op"] == "abort"]):
        if r.random() >= BUSY_ABORT_P:
            continue
        abort = steps[i]
        add = {"op": "add", "ref": ref, "engine": abort["engine"], "client": abort["client"],
               "max_tokens": LONG_TOKENS, "prompt_len": r.choice(PROMPT_LENS), "id_len": 8, "temperature": 0.0,
               "logprobs": None, "prompt_logprobs": None, "abort_immediately": False, "wave": None, "oversize": False}
        steps[i:i + 1] = [add, {"op": "wait", "until": "running", "ref": ref}, {**abort, "targets": [ref, *abort["targets"]]}]
        ref += 1


def _sleep_queries(steps: list[dict[str, Any]]) -> None:
    """Right after every sleep and wake-up, an is_sleeping on the same rank and client: the session's
    model knows its answer (ECP-UTIL-8), where a query drawn among the eleven rarely meets a rank
    just put to sleep or woken (an engine whose odd ranks answered it wrong went unseen in 33
    sessions). Nothing is drawn for it, so the rest of the session is unchanged."""
    for i in reversed([i for i, st in enumerate(steps) if st["op"] == "call" and st["method"] in ("sleep", "wake_up")
                       and not st.get("refused")]):
        call = steps[i]
        steps.insert(i + 1, {"op": "call", "engine": call["engine"], "client": call["client"],
                             "method": "is_sleeping", "args": []})


#: the share of sessions given a reset_prefix_cache once every request ended
IDLE_RESET_P = 0.25


def _idle_reset(r: random.Random, topo: Topology, steps: list[dict[str, Any]]) -> None:
    """In some sessions, in their second half, a wait until every request ended and then a
    reset_prefix_cache: on an idle rank it succeeds (ECP-UTIL-9). Drawn from a stream of its own."""
    if r.random() >= IDLE_RESET_P:
        return
    at = r.randint(len(steps) // 2, len(steps))
    steps[at:at] = [{"op": "wait", "until": "idle"},
                    {"op": "call", "engine": r.randrange(topo.engines), "client": r.randrange(topo.clients),
                     "method": "reset_prefix_cache", "args": r.choice([[], [False, False]])}]


def _refusals(r: random.Random, topo: Topology, steps: list[dict[str, Any]], malformed: bool,
              release: Speaks) -> None:
    """In some sessions, one message the engine must refuse: a call of an unknown method or with surplus
    arguments (a failure answers it, ECP-UTIL-3), a malformed UTILITY whose call id can be read (a
    failure or nothing answers it, never a result: ECP-ROB-1), or an ADD with a mistyped field whose
    request id can be read (an ERROR answers it, on the output of the input it came in on: ECP-ROB-2,
    ECP-HS-3). Without ``malformed``, always the call. Drawn from a stream of its own."""
    if r.random() >= REFUSAL_P:
        return
    at = r.randint(0, len(steps))
    engine, client = r.randrange(topo.engines), r.randrange(topo.clients)
    kind = r.choice(("call", "utility", "add"))
    if malformed and kind == "utility":
        payload = msgspec.msgpack.encode([client, REFUSED_CALL_ID + at, "is_sleeping", "not an array"])
        steps.insert(at, {"op": "garbage", "engine": engine, "client": client,
                          "frames": release.frames(["03", payload.hex()])})
    elif malformed and kind == "add":
        # ten elements: no client_index (element 11), so the answer goes where the ADD came in
        payload = msgspec.msgpack.encode([f"refused-add-{at}", "not a token list", None, {"temperature": "hot"},
                                          *[None] * 6])
        steps.insert(at, {"op": "garbage", "engine": engine, "client": client,
                          "frames": release.frames(["00", payload.hex()])})
    elif release.refused:
        method, args = r.choice(release.refused)
        steps.insert(at, {"op": "call", "engine": engine, "client": client, "method": method, "args": list(args),
                          "refused": True})


def _process_fault(r: random.Random, topo: Topology, steps: list[dict[str, Any]]) -> None:
    """Insert one process fault into ``steps``, in some sessions. A SIGKILL ends what is played,
    so it goes into the last third."""
    if r.random() >= PROCESS_FAULT_P:
        return
    engine = r.randrange(topo.engines)
    if r.random() < KILL_P:
        steps.insert(r.randint(len(steps) * 2 // 3, len(steps)), {"op": "kill", "engine": engine})
    else:
        steps.insert(r.randint(0, len(steps)), {"op": "stop", "engine": engine, "ms": r.choice(STOP_MS)})


def _add(r: random.Random, ref: int, engine: int, client: int, topo: Topology, wave: int,
         abort_immediately: float = 0.08, release: Speaks | None = None) -> dict[str, Any]:
    """An ADD step; what ``release`` lacks is drawn all the same and left out (the same draws)."""
    step = {
        "op": "add", "ref": ref, "engine": engine, "client": client,
        "max_tokens": r.choice(MAX_TOKENS), "prompt_len": r.choice(PROMPT_LENS), "id_len": r.choice(ID_LENS),
        "temperature": r.choice((0.0, 0.0, 0.8)), "logprobs": r.choice(LOGPROBS),
        "prompt_logprobs": r.choice((None,) * 6 + (2,)), "abort_immediately": r.random() < abort_immediately,
        "wave": wave if topo.coordinator and wave else None,
        # a prompt longer than the engine allows: answered with an ERROR output (ECP-REQ-3)
        "oversize": r.random() < 0.04,
    }
    if release is not None and not release.abort_immediately:
        step["abort_immediately"] = False
    if release is not None and not release.waves:
        step["wave"] = None
    return step
