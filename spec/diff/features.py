"""What works when a frontend of one release serves through an engine of another, feature by
feature, and the message where each break first shows.

The message-kind table of :mod:`.compat` says which payloads decode; a person deploying a pair
asks another question: does serving work, and which features do not? :func:`predict_pair`
answers it from the two layouts:

* **serving** (handshake, a plain request, its outputs, ABORT): HELLO, INIT, the ready payload and
  READY as :func:`.compat.check_message` checks them, then ADD and outputs in their ``sparse``
  samples (a request that sets only what it needs), then the ADD and ABORT type bytes; the first
  kind the receiver refuses is where serving breaks;
* every other feature (:data:`FEATURES`) in the order a frontend sends its messages: each UTILITY
  method it calls (the engine must have the method, take the number of arguments the frontend's
  release passes, and read every argument typed as a message, e.g. ``add_lora``'s
  ``LoRARequest``), then the ADD fields it sets (in the ``full`` sample). The first message
  refused is where the feature breaks: LoRA between 0.31 and 0.33 breaks in ``add_lora``, before
  any ADD carries the adapter.

Each break names the ``ecp spec diff`` rule behind it (:mod:`.explain`), as the live check of
``ecp monitor --frontend-vllm A --engine-vllm B`` does for the same message.
"""

from __future__ import annotations

from dataclasses import dataclass
from ..layout import types as wt
from ..layout import wire
from ..layout.model import Layout
from .compat import Cell, _verdict, check_message, check_type_bytes
from .compare import diff_layouts
from .explain import about_method, explaining


@dataclass(frozen=True)
class Feature:
    """A feature a frontend drives through HTTP: ``methods`` are the UTILITY methods it calls in
    order (``a|b``: the first of them the frontend's release has), ``add_fields`` the
    ``EngineCoreRequest`` fields its requests set."""

    name: str
    routes: str
    methods: tuple[str, ...] = ()
    add_fields: tuple[str, ...] = ()


SERVING = Feature("serving", "/v1/completions, /v1/chat/completions (streamed, and dropped: ABORT)")
FEATURES: tuple[Feature, ...] = (
    SERVING,
    Feature("sleep", "/sleep, /wake_up, /is_sleeping", ("sleep", "wake_up", "is_sleeping")),
    Feature("reset prefix cache", "/reset_prefix_cache", ("reset_prefix_cache",)),
    Feature("LoRA", "/v1/load_lora_adapter, a request naming the adapter", ("add_lora",), ("lora_request",)),
    Feature("profile", "/start_profile, /stop_profile", ("profile",)),
    Feature("pause", "/pause, /resume", ("pause_generation|pause_scheduler", "resume_scheduler")),
    Feature("weight checksums", "/weight_checker", ("compute_weight_checksums",)),
)
#: serving's message kinds in the order a pairing exchanges them: (shown as, message, sender role, samples)
_SERVING: tuple[tuple[str, str, str, tuple[wire.Mode, ...]], ...] = (
    ("HELLO", "Hello", "engine", ("full", "sparse")),
    ("INIT", "EngineHandshakeMetadata", "frontend", ("full", "sparse")),
    ("ready payload", "EngineCoreReadyResponse", "engine", ("full", "sparse")),
    ("READY", "Ready", "engine", ("full", "sparse")),
    ("ADD", "EngineCoreRequest", "frontend", ("sparse",)),  # a plain request: :func:`plain_request`
    ("outputs", "EngineCoreOutputs", "engine", ("sparse",)),
)
_BROKEN = ("rejected", "misaligned")


@dataclass(frozen=True)
class Prediction:
    """``works``, ``lossy`` (works; a receiver ignores or defaults fields), ``breaks`` or ``n/a``
    (the frontend's release does not have the feature); for a break, the message it shows in, the
    diff rule behind it and what happens."""

    verdict: str
    shows_in: str | None = None
    code: str | None = None
    note: str = ""

    def __str__(self) -> str:
        if self.verdict != "breaks":
            return self.verdict
        return f"breaks at {self.shows_in}" + (f" ({self.code})" if self.code else "")


_DIFFS: dict[tuple[int, int], tuple[Layout, Layout, tuple]] = {}


def _diff(frontend: Layout, engine: Layout) -> tuple:
    """``ecp spec diff FRONTEND ENGINE``, once per pair of layout objects (layouts are not hashable)."""
    key = (id(frontend), id(engine))
    hit = _DIFFS.get(key)
    if hit is None or hit[0] is not frontend or hit[1] is not engine:
        hit = _DIFFS[key] = (frontend, engine, tuple(diff_layouts(frontend, engine)))
    return hit[2]


def _code(found: list) -> str | None:
    return f"{found[0].rule.id} {found[0].subject}" if found else None


def plain_request(layout: Layout) -> list:
    """The ADD of a plain text request as a frontend of ``layout``'s release writes it: the sparse
    sample with every part a plain request leaves out absent (each field that admits nil, except
    its sampling parameters: no LoRA adapter, no multimodal features, no pooling)."""
    msg = layout.messages["EngineCoreRequest"]
    value = wire.sample(layout, "EngineCoreRequest", "sparse")
    for f in msg.fields:
        if f.name != "sampling_params" and any(m.kind == "nil" for m in f.wire_type.members):
            value[f.index] = None
    return value


def _check_plain_add(frontend: Layout, engine: Layout) -> Cell:
    if "EngineCoreRequest" not in frontend.messages or "EngineCoreRequest" not in engine.messages:
        return check_message(frontend, engine, "EngineCoreRequest", ("sparse",))
    issues = wire.check(engine, "EngineCoreRequest", wire.encode(plain_request(frontend)), frontend)
    shown = [i for i in issues if i.kind != "unchecked"] or issues
    verdict = _verdict(issues)
    return Cell(verdict, [str(i) for i in shown] if verdict != "ok" else [])


def _culprits(notes: list[str], found: list) -> list:
    """``found`` with the findings about a field a refusal names first."""
    paths = [n.split(" at ", 1)[-1].split(":", 1)[0] for n in notes if n.startswith(_BROKEN)]
    fields = {p.rsplit(".", 1)[-1] for p in paths}
    return sorted(found, key=lambda f: f.subject.rsplit(".", 1)[-1] not in fields)


def predict_serving(frontend: Layout, engine: Layout) -> Prediction:
    lossy = False
    for shown, message, role, modes in _SERVING:
        sender, receiver = (frontend, engine) if role == "frontend" else (engine, frontend)
        cell = (_check_plain_add(frontend, engine) if shown == "ADD"
                else check_message(sender, receiver, message, modes))
        if cell.verdict in _BROKEN:
            found = explaining(_diff(frontend, engine), (frontend, engine), [message])
            return Prediction("breaks", shown, _code(_culprits(cell.notes, found)), "; ".join(cell.notes))
        lossy |= cell.verdict == "lossy"
    types = check_type_bytes(frontend, engine)
    if any(n.startswith(("0x00 ", "0x01 ")) for n in types.notes):
        return Prediction("breaks", "type bytes", None, "; ".join(types.notes))
    return Prediction("lossy" if lossy else "works")


def _method(frontend: Layout, choice: str) -> str | None:
    return next((m for m in choice.split("|") if m in frontend.utility_methods), None)


def _predict_call(frontend: Layout, engine: Layout, method: str) -> Prediction | None:
    """How an engine of ``engine``'s release answers ``method`` called as ``frontend``'s release
    calls it (every positional argument of its signature); ``None``: it does."""
    shown = f"UTILITY {method}"
    diff = _diff(frontend, engine)
    em, fm = engine.utility_methods.get(method), frontend.utility_methods[method]
    if em is None:
        return Prediction("breaks", shown, _code(about_method(diff, method)), f"{method}: not in {engine.name}")
    if fm.params is None or em.params is None:
        return None  # a signature its source does not show: taken as it comes
    sent, required = len(fm.params), sum(1 for p in em.params if p.required)
    if not required <= sent <= len(em.params):
        return Prediction("breaks", shown, _code(about_method(diff, method)),
                          f"{method}: {sent} argument(s) sent, {engine.name} takes {required}..{len(em.params)}")
    for fp, ep in zip(fm.params, em.params):
        et = wt.parse(ep.type)
        if len(et.members) == 1 and et.members[0].kind == "struct":
            struct = et.members[0].name
            cell = check_message(frontend, engine, struct)
            if cell.verdict in _BROKEN:
                found = _culprits(cell.notes, explaining(diff, (frontend, engine), [struct]))
                return Prediction("breaks", shown, _code(found),
                                  f"{method} argument {ep.name}: " + "; ".join(cell.notes))
        elif not wt.accepts(et, wt.parse(fp.type)):
            return Prediction("breaks", shown, _code(about_method(diff, method)),
                              f"{method} argument {ep.name}: {fp.type} sent, {ep.type} taken")
    return None


def predict_feature(feature: Feature, frontend: Layout, engine: Layout) -> Prediction:
    if feature == SERVING:
        return predict_serving(frontend, engine)
    methods = [_method(frontend, m) for m in feature.methods]
    if feature.methods and not any(methods):
        return Prediction("n/a", note=f"{frontend.name} has no {', '.join(feature.methods)}")
    for method in methods:
        if method is not None and (broken := _predict_call(frontend, engine, method)) is not None:
            return broken
    if feature.add_fields:
        cell = check_message(frontend, engine, "EngineCoreRequest", ("full",))
        notes = [n for n in cell.notes if any(n.split(" at ", 1)[-1].startswith(f) for f in feature.add_fields)]
        if cell.verdict in _BROKEN and any(n.startswith(("rejected", "misaligned")) for n in notes):
            found = _culprits(notes, explaining(_diff(frontend, engine), (frontend, engine), ["EngineCoreRequest"]))
            return Prediction("breaks", "ADD", _code(found), "; ".join(notes))
    return Prediction("works")


def predict_pair(frontend: Layout, engine: Layout) -> dict[str, Prediction]:
    """Feature name -> prediction, in :data:`FEATURES` order."""
    return {f.name: predict_feature(f, frontend, engine) for f in FEATURES}


# --------------------------------------------------------------------------- markdown
def summary_cell(predictions: dict[str, Prediction]) -> str:
    """One pair in a few words: whether serving works, and which features break."""
    serving = predictions[SERVING.name]
    broken = [name for name, p in predictions.items() if name != SERVING.name and p.verdict == "breaks"]
    head = {"works": "serving ok", "lossy": "serving ok (lossy)"}.get(
        serving.verdict, f"serving BREAKS ({serving.shows_in})")
    if serving.verdict == "works" and not broken:
        return "ok"
    return head + (f"; breaks: {', '.join(broken)}" if broken else "")


def render_features(layouts: list[Layout]) -> list[str]:
    """The per-feature table of every pair, with the message where each break first shows."""
    names = [f.name for f in FEATURES]
    lines = ["", "## Features per pair", "",
             "What a frontend of one release can do through an engine of another, feature by feature "
             "(`ecp.spec.diff.features`): **serving** is the handshake, a plain request (no LoRA, no "
             "multimodal input), its outputs and ABORT; each other feature is the UTILITY calls and request "
             "fields its HTTP routes send, in the order they are sent. A break names the message where it "
             "first shows and the `ecp spec diff` rule behind it; **lossy**: it works, a receiver ignores "
             "fields the sender wrote or defaults fields it did not; **n/a**: the frontend's release does "
             "not have the feature.", "",
             "| feature | HTTP routes | UTILITY methods |", "|---|---|---|"]
    for f in FEATURES:
        methods = ", ".join(m.replace("|", " or ") for m in f.methods) or "-"
        lines.append(f"| {f.name} | {f.routes} | {methods} |")
    lines += ["", "| frontend | engine | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for fl in layouts:
        for el in layouts:
            cells = predict_pair(fl, el)
            lines.append(f"| {fl.name} | {el.name} | " + " | ".join(str(cells[n]) for n in names) + " |")
    return lines
