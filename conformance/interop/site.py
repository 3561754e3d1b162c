"""``ecp interop site``: the static results site of one or more results sets.

Input: a folder of results sets (each a folder of runs, ``RUN/result.json``, as ``ecp interop run``
or ``ecp conformance ... --results`` write them; ``set.json`` when ``interop run`` made it). Output:
plain HTML + CSS + a little JavaScript, rendered from the Jinja2 templates of ``conformance/templates/site/`` (sharing the outcome
colours and the case evidence with the run's HTML report, :mod:`ecp.conformance.html`), that
opens from the file system and from any static host:

* ``index.html``: the newest set, per role a matrix implementations x releases; a cell has the
  run's counts, its colour and the ids of what failed, and links to the run's page;
* ``runs/SET/RUN/index.html``: every case with its outcome, reason, expected-failure entry and
  its source line, and the transcript (copied beside the page);
* ``cross.html``: frontend release x engine release, observed (``spec/compat/observed-cross.json``,
  through ``ecp monitor``) beside predicted (``ecp spec compat``'s model);
* ``history.html``: every set (each links to its matrix, ``sets/SET.html``) and the diff of two sets:
  which cells changed (:func:`diff_sets`, computed here for every pair of sets; the page only picks);
* ``cases/ID.html``: what a case checks, its clause, and which implementations fail it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..html import TEMPLATES, environment
from . import results as res

#: outcomes that make a cell name a case as failed (counted or not)
FAILED = ("FAIL", "TIMEOUT", "CRASH", "XPASS", "ERROR")
ROLES = ("engine", "frontend")
#: how much of a transcript a run's page shows inline (the file beside it is whole)
INLINE_TRANSCRIPT_CHARS = 100_000


class SiteError(Exception):
    """The results cannot be rendered; ``problems``: one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Run:
    doc: dict[str, Any]
    folder: Path
    set_name: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.doc["role"], self.doc["implementation"]["name"], self.doc["release"])

    @property
    def page(self) -> str:
        """The run's page, relative to the site's root."""
        return f"runs/{self.set_name}/{self.folder.name}/index.html"

    def cell(self) -> dict[str, Any]:
        """What the matrix shows for the run: status (pass, xfail, fail, not-served), counts, the
        ids of failed and expected-to-fail cases, and the cause when it never served."""
        d = self.doc
        failed = [c["id"] for c in d["cases"] if c["outcome"] in FAILED]
        xfail = [c["id"] for c in d["cases"] if c["outcome"] == "XFAIL"]
        if not d["served"]["ok"]:
            status = "not-served"
        elif d["exit_code"] != 0:
            status = "fail"
        elif xfail:
            status = "xfail"
        else:
            status = "pass"
        counts = {k: n for k, n in d["counts"].items() if n}
        return {"status": status, "counts": counts, "failed": failed, "xfail": xfail,
                "cause": d["served"]["cause"], "problems": d["problems"], "page": self.page,
                "text": cell_text(status, counts, failed, d["served"]["cause"])}


def cell_text(status: str, counts: dict[str, int], failed: list[str], cause: str | None) -> str:
    """A cell in one line (the history diff shows it before and after)."""
    if status == "not-served":
        return f"never served: {cause}"
    text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no cases"
    return text + (f"; failed: {' '.join(failed)}" if failed else "")


@dataclass
class ResultSet:
    name: str
    meta: dict[str, Any]
    runs: dict[tuple[str, str, str], Run] = field(default_factory=dict)

    @property
    def missing(self) -> list[dict[str, Any]]:
        return list(self.meta.get("missing", []))

    @property
    def started(self) -> str:
        return self.meta.get("started") or min((r.doc["started"] for r in self.runs.values()), default="")

    def commits(self) -> list[str]:
        return sorted({str(r.doc["ecp"]["commit"]) for r in self.runs.values()})


def load_sets(root: Path) -> list[ResultSet]:
    """Every results set under ``root``, oldest first; :class:`SiteError` lists every document that
    does not fit the schema."""
    found = sorted(root.rglob(res.RESULT_FILE))
    sets: dict[Path, ResultSet] = {}
    problems = []
    for path in found:
        try:
            doc = res.load(path)
        except res.ResultsError as exc:
            problems += [f"{path}: {p}" for p in exc.problems]
            continue
        set_dir = path.parent.parent
        if set_dir not in sets:
            meta_path = set_dir / "set.json"
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            name = set_dir.name if set_dir != root else root.name
            sets[set_dir] = ResultSet(name, meta)
        s = sets[set_dir]
        run = Run(doc, path.parent, s.name)
        old = s.runs.get(run.key)
        if old is None or old.doc["started"] < doc["started"]:  # the same pair twice: the later run
            s.runs[run.key] = run
    if problems:
        raise SiteError(problems)
    if not sets:
        raise SiteError([f"{root}: no {res.RESULT_FILE} under it"])
    names = [s.name for s in sets.values()]
    if len(set(names)) != len(names):
        raise SiteError([f"{root}: two results sets are both named {n!r}" for n in sorted(set(names))
                         if names.count(n) > 1])
    return sorted(sets.values(), key=lambda s: (s.started, s.name))


def _release_key(release: str) -> tuple:
    try:
        return (0, *(int(x) for x in release.split(".")))
    except ValueError:
        return (1, release)


def matrix(s: ResultSet) -> list[dict[str, Any]]:
    """Per role: its implementations (rows), releases (columns) and cells (run, missing or none)."""
    out = []
    for role in ROLES:
        runs = {k: r for k, r in s.runs.items() if k[0] == role}
        missing = {(m["implementation"], m["release"]): m["why"] for m in s.missing if m["role"] == role}
        impls = sorted({k[1] for k in runs} | {m[0] for m in missing})
        releases = sorted({k[2] for k in runs} | {m[1] for m in missing}, key=_release_key)
        if not impls:
            continue
        rows = []
        for impl in impls:
            cells = []
            for release in releases:
                run = runs.get((role, impl, release))
                if run is not None:
                    cells.append({"release": release, **run.cell()})
                elif (impl, release) in missing:
                    cells.append({"release": release, "status": "missing", "why": missing[(impl, release)]})
                else:
                    cells.append({"release": release, "status": "none"})
            rows.append({"implementation": impl, "cells": cells})
        out.append({"role": role, "releases": releases, "rows": rows,
                    "missing": sorted({(i, why) for (i, _), why in missing.items()}),
                    "missing_releases": {i: sorted([r for (j, r) in missing if j == i], key=_release_key)
                                         for i in {i for i, _ in missing}}})
    return out


def diff_sets(a: ResultSet, b: ResultSet) -> list[dict[str, Any]]:
    """The cells that differ from set ``a`` to set ``b``: a run added or gone, or its status, counts
    or failed cases changed. Rows in role, implementation, release order."""
    out = []
    for key in sorted(set(a.runs) | set(b.runs), key=lambda k: (k[0], k[1], _release_key(k[2]))):
        before = a.runs[key].cell() if key in a.runs else None
        after = b.runs[key].cell() if key in b.runs else None
        sig = [None if c is None else (c["status"], c["counts"], c["failed"], c["xfail"], c["cause"])
               for c in (before, after)]
        if sig[0] == sig[1]:
            continue
        change = "added" if before is None else "gone" if after is None else "changed"
        out.append({"role": key[0], "implementation": key[1], "release": key[2], "change": change,
                    "before": before and {"status": before["status"], "text": before["text"]},
                    "after": after and {"status": after["status"], "text": after["text"], "page": after["page"]}})
    return out


def case_pages(s: ResultSet) -> list[dict[str, Any]]:
    """Per case of the catalogue: what it checks, its clause, and each run's outcome for it."""
    from ecp.spec.clauses import CLAUSES

    from ..registry import load_role

    pages = []
    for role in ROLES:
        for c in load_role(role):
            clause = CLAUSES.get(c.clause)
            outcomes = []
            for key, run in sorted(s.runs.items(), key=lambda kv: (kv[0][1], _release_key(kv[0][2]))):
                if key[0] != role:
                    continue
                case = next((x for x in run.doc["cases"] if x["id"] == c.id), None)
                if case is not None:
                    outcomes.append({"implementation": key[1], "release": key[2], "outcome": case["outcome"],
                                     "reason": case["reason"], "page": run.page,
                                     "expected_failure": case["expected_failure"]})
            pages.append({"id": c.id, "slug": c.slug, "role": role, "requirement": c.requirement,
                          "level": c.level, "conformance_level": c.conformance_level, "clause": c.clause,
                          "clause_title": clause.title if clause else "", "clause_text": clause.text if clause else "",
                          "also": list(c.also), "outcomes": outcomes,
                          "failing": [o for o in outcomes if o["outcome"] in FAILED],
                          "xfailing": [o for o in outcomes if o["outcome"] == "XFAIL"]})
    return pages


def cross_release(observed_path: Path | None) -> dict[str, Any] | None:
    """The cross-release page's data: per (frontend release, engine release) the observed summary
    beside the predicted one, every feature's observation and prediction, and for a pair that never
    served its cause (the monitor's first finding when it had one)."""
    if observed_path is None or not Path(observed_path).exists():
        return None
    from ecp.spec.diff.features import predict_pair, summary_cell
    from ecp.spec.diff.observed import agrees, load_observed, observed_text, verdict_of
    from ecp.spec.layout.resolve import load_shipped, shipped_names

    observed = load_observed(observed_path)
    shipped = set(shipped_names())
    releases = [r for r in observed.releases if f"vllm-{r}" in shipped]
    layouts = {r: load_shipped(f"vllm-{r}") for r in releases}
    grid, details = {}, []
    for f in releases:
        for e in releases:
            predicted = predict_pair(layouts[f], layouts[e])
            pair = observed.pairs.get((f, e))
            monitor = [x.get("first") for x in ((pair or {}).get("monitor") or {}).get("release", [])]
            cell = {"frontend": f, "engine": e, "predicted": summary_cell(predicted), "monitor": monitor}
            if pair is None:
                cell.update(status="none", observed="not run")
            elif not pair.get("started"):
                cell.update(status="not-served", observed="did not serve",
                            cause=(monitor[0] if monitor else None) or pair.get("problem"))
            else:
                same = observed.pairs.get((f, f), {}).get("features", {})
                rows, broken, disagree = [], [], 0
                for name, p in predicted.items():
                    feature = pair["features"].get(name)
                    if feature is None:
                        continue
                    ok = agrees(p, feature, same.get(name))
                    disagree += not ok
                    verdict, shows_in = verdict_of(feature)
                    if verdict == "breaks":
                        broken.append(name)
                    rows.append({"feature": name, "predicted": str(p), "observed": observed_text(feature),
                                 "agree": ok, "verdict": verdict})
                serving = next((r for r in rows if r["feature"] == "serving"), None)
                status = "fail" if serving and serving["verdict"] == "breaks" else "xfail" if broken else "pass"
                cell.update(status=status, disagree=disagree,
                            observed=("serving ok" if status != "fail" else "serving BREAKS")
                            + (f"; breaks: {', '.join(b for b in broken if b != 'serving')}"
                               if [b for b in broken if b != "serving"] else ""), seconds=pair.get("seconds"))
                details.append({"frontend": f, "engine": e, "rows": rows})
            grid[(f, e)] = cell
    return {"releases": releases, "grid": [[grid[(f, e)] for e in releases] for f in releases],
            "details": details, "source": res.shown_path(observed_path)}


def render(root: Path, out: Path, observed: Path | None = None, title: str = "ecp interop results") -> list[Path]:
    """Render the site of the sets under ``root`` into ``out``; return the pages written."""
    sets = load_sets(root)
    env = environment()
    out.mkdir(parents=True, exist_ok=True)
    (out / "style.css").write_text(env.get_template("site/style.css.j2").render(), encoding="utf-8")
    shutil.copyfile(TEMPLATES / "site" / "site.js", out / "site.js")
    # the front page: the newest set `interop run` made (a submission is a set without set.json)
    latest = next((s for s in reversed(sets) if s.meta), sets[-1])
    written = []

    def page(rel: str, template: str, **ctx: Any) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        depth = rel.count("/")
        path.write_text(env.get_template(f"site/{template}").render(root="../" * depth, title=title, latest=latest.name,
                                                          **ctx))
        written.append(path)

    for s in sets:
        ctx = {"set": s, "matrix": matrix(s), "is_latest": s is latest}
        page(f"sets/{s.name}.html", "matrix.html", **ctx)
        if s is latest:
            page("index.html", "matrix.html", **ctx)
        for run in s.runs.values():
            rel = run.page
            target = out / Path(rel).parent
            cases = []
            for c in run.doc["cases"]:
                text = None
                if c["transcript"]:
                    src = run.folder / c["transcript"]
                    if src.exists():
                        dst = target / c["transcript"]
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src, dst)
                        text = src.read_text(errors="replace")
                        if len(text) > INLINE_TRANSCRIPT_CHARS:  # the page stays light; the file is whole
                            text = (text[:INLINE_TRANSCRIPT_CHARS]
                                    + f"\n... (the first {INLINE_TRANSCRIPT_CHARS} characters; the whole file: "
                                      f"{c['transcript']})")
                cases.append({**c, "transcript_text": text})
            page(rel, "run.html", run=run.doc, set=s, cases=cases, cell=run.cell())
    diffs = {f"{a.name}|{b.name}": diff_sets(a, b) for a in sets for b in sets if a is not b}
    page("history.html", "history.html", sets=list(reversed(sets)), diffs=json.dumps(diffs),
         default_a=next((s.name for s in reversed(sets) if s is not latest), latest.name), default_b=latest.name)
    cases = case_pages(latest)
    for c in cases:
        page(f"cases/{c['id']}.html", "case.html", case=c, set=latest)
    page("cases.html", "cases.html", cases=cases, set=latest)
    page("cross.html", "cross.html", cross=cross_release(observed))
    return written
