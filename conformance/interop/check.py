"""``ecp interop check DIR``: is a submission from elsewhere fit to join the results?

A submission is a folder (added by pull request under the results' ``submissions/`` folder,
docs/interop-site.md) with:

* ``product.json``: the implementation in a few fields (:data:`PRODUCT_FIELDS`);
* one or more runs, each a folder with ``result.json`` and its ``transcripts/``, as
  ``ecp conformance engine|frontend ... --results RUN --implementation NAME`` writes them.

:func:`check` returns every problem, one line each; an empty list means the submission is accepted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import results as res

PRODUCT_FILE = "product.json"
#: field -> what it holds (every one required, a non-empty string)
PRODUCT_FIELDS = {
    "name": "the implementation's name, as the results' implementation.name",
    "version": "its version or commit",
    "role": "engine or frontend (or both: \"engine,frontend\")",
    "url": "where its source or documentation lives",
    "contact": "who answers questions about the results",
}


def _product(folder: Path) -> tuple[dict[str, Any] | None, list[str]]:
    path = folder / PRODUCT_FILE
    if not path.exists():
        return None, [f"{PRODUCT_FILE}: missing (fields: {', '.join(PRODUCT_FIELDS)})"]
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, [f"{PRODUCT_FILE}: not JSON: {exc}"]
    if not isinstance(doc, dict):
        return None, [f"{PRODUCT_FILE}: not a JSON object"]
    problems = [f"{PRODUCT_FILE}: {name} missing or empty ({what})" for name, what in PRODUCT_FIELDS.items()
                if not isinstance(doc.get(name), str) or not doc[name].strip()]
    roles = {r.strip() for r in str(doc.get("role", "")).split(",") if r.strip()}
    if doc.get("role") and not roles <= {"engine", "frontend"}:
        problems.append(f"{PRODUCT_FILE}: role {doc['role']!r} is not engine, frontend or engine,frontend")
    unknown = sorted(set(doc) - set(PRODUCT_FIELDS) - {"description"})
    if unknown:
        problems.append(f"{PRODUCT_FILE}: unknown field(s) {', '.join(unknown)}")
    return doc, problems


def check(folder: Path) -> list[str]:
    """Every problem of the submission in ``folder``, one line each (empty: accepted)."""
    from ..registry import load_role

    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder}: not a folder"]
    product, problems = _product(folder)
    found = sorted(folder.rglob(res.RESULT_FILE))
    if not found:
        problems.append(f"no {res.RESULT_FILE}: a submission holds at least one run "
                        "(ecp conformance ROLE ... --results DIR)")
    this_ecp = res.ecp_version()
    for path in found:
        where = str(path.relative_to(folder))
        try:
            doc = res.load(path)
        except res.ResultsError as exc:
            problems += [f"{where}: {p}" for p in exc.problems]
            continue
        if doc["ecp"]["version"] != this_ecp:
            problems.append(f"{where}: made with ecp {doc['ecp']['version']}, this is ecp {this_ecp}: "
                            "rerun with this ecp")
        if product and product.get("name") and doc["implementation"]["name"] != product["name"]:
            problems.append(f"{where}: implementation.name {doc['implementation']['name']!r} is not "
                            f"{PRODUCT_FILE}'s name {product['name']!r}")
        if product and product.get("role") and doc["role"] not in str(product["role"]):
            problems.append(f"{where}: role {doc['role']} is not among {PRODUCT_FILE}'s role {product['role']!r}")
        if doc["exit_code"] == 2 or doc["counts"].get("ERROR"):
            problems.append(f"{where}: the harness itself failed (exit {doc['exit_code']}): not a result")
        catalogue = {c.id for c in load_role(doc["role"])}
        ran = {c["id"] for c in doc["cases"]}
        if ran != catalogue:
            left = sorted(catalogue - ran)
            problems.append(f"{where}: ran {len(ran & catalogue)} of the {len(catalogue)} {doc['role']}-role cases "
                            f"(a submission runs them all; missing {', '.join(left[:5])}"
                            f"{' ...' if len(left) > 5 else ''})" + (
                                f"; unknown to this ecp: {', '.join(sorted(ran - catalogue))}" if ran - catalogue else ""))
        for c in doc["cases"]:
            if c["transcript"] and not (path.parent / c["transcript"]).is_file():
                problems.append(f"{where}: {c['id']}: transcript {c['transcript']} missing")
    return problems
