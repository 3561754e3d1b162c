"""The executed cross-release matrix: what real peers did, beside what the model predicts.

``lab/interop_matrix.py --cross A,B,...`` runs a real vLLM frontend of one release in
front of a real engine core of another through ``ecp monitor`` and writes, per ordered pair and
feature (:data:`ecp.spec.diff.features.FEATURES`), the HTTP calls it made, the monitor's findings
and every UTILITY call with the engine's answer. :func:`load_observed` reads that file,
:func:`verdict_of` reduces one feature's record to a verdict, and :func:`render_executed` writes
the section of ``docs/compatibility.md`` that shows each observation beside its prediction
(:func:`ecp.spec.diff.features.predict_pair`) and whether they agree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..layout.model import Layout, LayoutError

#: where the checked-in results live (``ecp spec compat`` renders them when present)
OBSERVED_PATH = Path(__file__).resolve().parents[1] / "compat" / "observed-cross.json"


def verdict_of(feature: dict[str, Any]) -> tuple[str, str | None]:
    """One feature's observed verdict and the message its break showed in:

    * ``n/a``: the frontend's release has no route for it;
    * ``breaks``: the monitor reported a message the receiver's release refuses (its
      ``shows_in``), or the engine answered a UTILITY call with a failure (``UTILITY method``),
      or a dropped stream sent no ABORT;
    * ``http-error``: every protocol message was read and answered, but an HTTP call failed
      (what the peers' model-free executor cannot do, the same in every pairing);
    * ``works``."""
    if not feature.get("route", True):
        return "n/a", None
    for finding in feature.get("findings", []):
        return "breaks", finding.get("shows_in")
    for call in feature.get("utility", []):
        if call.get("failure") is not None:
            return "breaks", f"UTILITY {call['method']}"
    if feature.get("aborts") == 0:
        return "breaks", "ABORT"
    if not feature.get("http_ok", True):
        return "http-error", None
    return "works", None


@dataclass
class Observed:
    """A results file: the releases run, and per (frontend, engine) pair its record."""

    releases: list[str]
    pairs: dict[tuple[str, str], dict[str, Any]]
    path: str


def load_observed(path: Path | str) -> Observed:
    """Read a results file; :class:`LayoutError` for one that is not such a file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        pairs = {(p["frontend"], p["engine"]): p for p in doc["pairs"]}
        return Observed(list(doc["releases"]), pairs, str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LayoutError(f"{path}: not an executed cross-release matrix ({exc})") from None


def _http(feature: dict[str, Any]) -> str:
    statuses = [f"{c['call'].split(' ', 1)[1].split('?')[0]} {c['status'] if c['status'] is not None else 'no answer'}"
                for c in feature.get("calls", [])]
    return ", ".join(statuses)


def observed_text(feature: dict[str, Any]) -> str:
    """One feature's observation in a cell: verdict, where it broke and why, the HTTP statuses."""
    verdict, shows_in = verdict_of(feature)
    if verdict == "n/a":
        return "n/a (no route)"
    why = ""
    if verdict == "breaks":
        finding = next(iter(feature.get("findings", [])), None)
        failure = next((c for c in feature.get("utility", []) if c.get("failure") is not None), None)
        if finding is not None:
            why = f"; monitor: {finding['message']}"
        elif failure is not None:
            why = f"; engine: {failure['failure']}"
    elif verdict == "http-error":
        failed = next((c for c in feature.get("calls", []) if c.get("body") and not _succeeded(c)), None)
        why = f"; every message answered, the HTTP call failed: {failed['body']}" if failed else ""
    head = f"breaks at {shows_in}" if verdict == "breaks" else verdict
    aborts = f", {feature['aborts']} ABORT" if "aborts" in feature else ""
    return _cell(f"{head}{why} (HTTP {_http(feature)}{aborts})")


def _succeeded(call: dict[str, Any]) -> bool:
    return call.get("status") is not None and 200 <= call["status"] < 300


def _cell(text: str, limit: int = 400) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def agrees(prediction: Any, feature: dict[str, Any], same_release: dict[str, Any] | None) -> bool:
    """Whether an observation is what the model predicts: the same verdict, a break at the same
    message; an HTTP error with every message answered counts as working when the feature fails
    the same way between two peers of the frontend's release (``same_release``)."""
    verdict, shows_in = verdict_of(feature)
    if prediction.verdict in ("works", "lossy"):
        if verdict == "http-error":
            return same_release is not None and verdict_of(same_release)[0] == "http-error"
        return verdict == "works"
    if prediction.verdict == "breaks":
        return verdict == "breaks" and shows_in == prediction.shows_in
    return verdict == prediction.verdict


def render_executed(layouts: list[Layout], observed: Observed) -> list[str]:
    """The executed matrix: per pair run, each feature observed beside its prediction."""
    from .features import FEATURES, predict_pair, summary_cell

    by_release = {}
    for layout in layouts:
        m = re.fullmatch(r"vllm-(\d+\.\d+)", layout.name)
        if m:
            by_release[m.group(1)] = layout
    releases = [r for r in observed.releases if r in by_release]
    names = [f.name for f in FEATURES]
    rows, grid, disagree = [], {}, 0
    for f in releases:
        for e in releases:
            pair = observed.pairs.get((f, e))
            predicted = predict_pair(by_release[f], by_release[e])
            if pair is None or not pair.get("started"):
                grid[(f, e)] = "not run" if pair is None else f"did not start: {_cell(str(pair.get('problem')), 80)}"
                continue
            diagonal = observed.pairs.get((f, f), {}).get("features", {})
            seen = {}
            for name in names:
                feature = pair["features"].get(name)
                if feature is None:
                    continue
                ok = agrees(predicted[name], feature, diagonal.get(name))
                disagree += not ok
                seen[name] = verdict_of(feature)
                rows.append(f"| {f} | {e} | {name} | {predicted[name]} | {observed_text(feature)} | "
                            f"{'yes' if ok else '**NO**'} |")
            serving = seen.get("serving", ("?", None))
            broken = [n for n, (v, _) in seen.items() if n != "serving" and v == "breaks"]
            observed_cell = ({"works": "serving ok", "http-error": "serving: HTTP error"}.get(
                serving[0], f"serving BREAKS ({serving[1]})") + (f"; breaks: {', '.join(broken)}" if broken else ""))
            if observed_cell == "serving ok":
                observed_cell = "ok"
            grid[(f, e)] = f"{observed_cell} (predicted: {summary_cell(predicted)})"
    lines = ["", f"## Executed: {{{', '.join(releases)}}}²", "",
             "Real vLLM peers (`../shared/peers/vllm/`: the API server, Python frontend and engine core of "
             "each release, with a model-free executor), a frontend of one release in front of a headless "
             "engine core of another, every ordered pair, through `ecp monitor --frontend-vllm A "
             "--engine-vllm B`; regenerate the results with "
             f"`python -m lab.interop_matrix --cross {','.join(releases)}` (`{_shown(observed.path)}`). "
             "Each feature's HTTP traffic ran in turn; its observation is the monitor's finding (a message "
             "the receiving release refuses, with its `ecp spec diff` rule), the engine's failure answer to "
             "a UTILITY call, and the HTTP statuses, beside the prediction of *Features per pair*. "
             f"Observed and predicted disagree in {disagree} cell(s).", "",
             "| frontend \\ engine | " + " | ".join(f"`vllm-{r}`" for r in releases) + " |",
             "|---|" + "---|" * len(releases)]
    for f in releases:
        lines.append(f"| `vllm-{f}` | " + " | ".join(grid[(f, e)] for e in releases) + " |")
    lines += ["", "| frontend | engine | feature | predicted | observed | agree |", "|---|---|---|---|---|---|"]
    lines += rows
    return lines


def _shown(path: str) -> str:
    p = Path(path).resolve()
    root = OBSERVED_PATH.parents[2]
    return str(p.relative_to(root)) if p.is_relative_to(root) else p.name
