"""The results format: one JSON document per conformance run, with its transcripts beside it.

``ecp conformance engine|frontend ... --results DIR`` writes ``DIR/result.json`` (schema
``conformance/interop/schema/run.schema.json``) and ``DIR/transcripts/<case id>.txt``. The document
says what ran (implementation, its version or commit, role, the vLLM release it was judged as), with
which ecp (version and commit) at which level, when and where, and per case its outcome, the reason,
the expected-failure entry that matched it with its source line, and the transcript file. A reader
(the site, ``ecp interop check``) validates it against the schema before use.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..expected import Entry
    from ..report import RunSummary

SCHEMA_PATH = Path(__file__).parent / "schema" / "run.schema.json"
SCHEMA_ID = "https://ecp.invalid/conformance/interop/run.schema.json"
SCHEMA_VERSION = 1
#: the file one run writes into its results folder
RESULT_FILE = "result.json"
TRANSCRIPTS = "transcripts"


class ResultsError(Exception):
    """A results document that cannot be read or does not fit the schema; ``problems`` lists each
    problem on its own line (the receiver refuses the document and says every problem)."""

    def __init__(self, path: str | Path, problems: list[str]) -> None:
        super().__init__(f"{path}: " + "; ".join(problems))
        self.path = str(path)
        self.problems = problems


def ecp_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engine-core-protocol")
    except PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=1)
def ecp_commit() -> str | None:
    """The commit of the ecp checkout this package runs from (with ``+dirty`` when it has changes
    to tracked files), or None outside a git checkout."""
    root = ecp_root()
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def ecp_root() -> Path:
    """The ecp checkout this package runs from (its top-level folders are the packages)."""
    return Path(__file__).resolve().parents[2]


def shown_path(path: str | Path | None) -> str | None:
    """A file path as a result records it: relative to the ecp checkout when inside it (a document
    made on one machine reads the same on another), else as given."""
    if path is None:
        return None
    p = Path(path).resolve()
    return str(p.relative_to(ecp_root())) if p.is_relative_to(ecp_root()) else str(path)


def machine(name: str | None = None) -> dict[str, Any]:
    """Where the run ran: a name the user chose (``--machine``), the OS, CPU model and count, Python."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"name": name, "os": platform.platform(), "cpu": cpu or None, "cpus": os.cpu_count() or 0,
            "python": platform.python_version()}


def implementation_name(target: Sequence[str] | str) -> str:
    """A default implementation name from the command under test: its program's file name (a
    Python interpreter's module, ``-m MODULE``, or script)."""
    argv = target.split() if isinstance(target, str) else list(target)
    if not argv:
        return "unnamed"
    if argv[0] in ("--adapter", "--attach") and len(argv) > 1:  # the runner's target for those modes
        return argv[1] if argv[0] == "--adapter" else f"attached at {argv[1]}"
    prog = Path(argv[0]).name
    if prog.startswith("python") and len(argv) > 1:
        rest = argv[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return rest[1]
        return Path(rest[0]).name
    return prog


def served(launches: dict[str, Any] | None, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the peer ever served, and if not why (the first launch's state: the reason the
    harness saw, e.g. its exit status or a start-up timeout)."""
    rows = (launches or {}).get("launches", [])
    if rows:
        if any(r["startup_s"] is not None for r in rows):
            return {"ok": True, "cause": None}
        # the launch's state names the kind (failed: PeerCrashed); its case's reason says what happened
        first = next((c for c in cases if c["id"] == rows[0]["case"] and c["reason"]), None)
        why = first["reason"].splitlines()[0].rstrip(":; ") if first else ""
        return {"ok": False, "cause": f"{rows[0]['state']}: {why}" if why else rows[0]["state"]}
    # no launches recorded (an attached or in-process peer): it served when a case got past start-up
    if any(c["outcome"] not in ("CRASH", "TIMEOUT", "ERROR") for c in cases):
        return {"ok": True, "cause": None}
    return {"ok": not cases, "cause": None if not cases else "no case got an answer from the peer"}


def document(*, implementation: dict[str, Any], role: str, release: str, level: str, strict: bool,
             started: str, duration_s: float, target: str, exit_code: int, counts: dict[str, int],
             problems: list[str], launches: dict[str, Any] | None, release_fit: dict[str, Any] | None,
             cases: list[dict[str, Any]], expected_failures: str | None, machine_name: str | None = None,
             served_: dict[str, Any] | None = None) -> dict[str, Any]:
    """A results document (every field of the schema); ``served_`` overrides what the launches say
    (``ecp interop run`` for a run that ended before the harness wrote anything)."""
    return {
        "$schema": SCHEMA_ID, "schema_version": SCHEMA_VERSION,
        "implementation": implementation, "role": role, "release": release,
        "ecp": {"version": ecp_version(), "commit": ecp_commit()},
        "level": level, "strict": strict, "started": started, "duration_s": round(duration_s, 3),
        "machine": machine(machine_name), "target": target, "exit_code": exit_code, "counts": counts,
        "problems": problems, "served": served_ or served(launches, cases),
        "launches": launches or {"count": 0, "total_startup_s": 0.0, "launches": [], "response_s": None,
                                 "case_budget_s": None, "startup_budget_s": None},
        "release_fit": release_fit, "expected_failures": expected_failures, "cases": cases,
    }


def write_results(s: "RunSummary", directory: Path, *, release: str | None = None, entries: Sequence["Entry"] = (),
                  expected_failures: str | None = None, implementation: str | None = None,
                  implementation_version: str | None = None, implementation_commit: str | None = None,
                  machine_name: str | None = None) -> Path:
    """Write ``directory/result.json`` and the transcripts of the run ``s``; return the document's path.
    ``release``: the release the run judged as, when the runner knows it; else the release report's
    (the engine role's ``--vllm``, or the release ``auto`` chose)."""
    from ..report import write_transcripts

    directory.mkdir(parents=True, exist_ok=True)
    written = {p.stem for p in write_transcripts(s, directory / TRANSCRIPTS)}
    fit = s.to_json()["release"]
    cases = []
    for r in s.results:
        entry = next((e for e in entries if e.matches(r.id)), None)
        cases.append({
            "id": r.id, "clause": r.clause, "level": r.level, "conformance_level": r.conformance_level,
            "slug": r.slug, "requirement": r.requirement, "outcome": r.outcome.value, "blocking": r.blocking,
            "reason": r.message, "duration_s": round(r.duration_s, 4),
            "expected_failure": None if entry is None else {
                "entry": entry.line_text(), "reason": entry.reason, "source": shown_path(expected_failures),
                "line": entry.line},
            "transcript": f"{TRANSCRIPTS}/{r.id}.txt" if r.id in written else None,
        })
    doc = document(
        implementation={"name": implementation or implementation_name(s.target), "version": implementation_version,
                        "commit": implementation_commit},
        role=s.role, release=release or fit["under_test"], level=s.conformance_level, strict=s.strict, started=s.started,
        duration_s=s.duration_s, target=s.target, exit_code=s.exit_code, counts=s.counts, problems=s.problems,
        launches=s.launches, release_fit=fit, cases=cases, expected_failures=shown_path(expected_failures),
        machine_name=machine_name)
    path = directory / RESULT_FILE
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def problems_of(doc: Any) -> list[str]:
    """Every way ``doc`` does not fit the schema, one line each (``at $.path: message``)."""
    out = []
    for err in sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        out.append(f"schema: at {where}: {err.message[:300]}")
    return out


def load(path: Path) -> dict[str, Any]:
    """Read and validate one results document; :class:`ResultsError` names every problem."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(path, [f"cannot read: {exc}"]) from None
    except ValueError as exc:
        raise ResultsError(path, [f"not JSON: {exc}"]) from None
    problems = problems_of(doc)
    if problems:
        raise ResultsError(path, problems)
    return doc


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
