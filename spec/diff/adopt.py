"""``ecp spec release add``: adopt a vLLM release in one command.

It reads the release's layout from a wheel or a checkout (:func:`ecp.spec.layout.vllm.extract`),
writes it to ``spec/layouts/vllm-X.Y.json`` and regenerates everything generated from the shipped
layouts: the release's wire types (``spec/wiretypes/``, ``ecp spec types``), the JSON Schemas and
PROTOCOL.md's generated blocks (``ecp schema``: the ``vLLM`` column of
every field and UTILITY table, the release span beside every release-bound clause) and
docs/compatibility.md (``ecp spec compat``). It then says what changed against the release before it
(``ecp spec diff``'s findings) and which clauses' release spans moved.

The repository it writes into is ``--root`` (default: the one this package is in), so a rehearsal can
adopt a release into a copy. The regeneration runs in a child process that imports that root's
``spec/`` as :mod:`ecp.spec`: its generators write beside their own modules, and the copy's shipped
layouts are the ones they read.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..layout.model import Layout, LayoutError, decode_layout, encode_layout

#: the repository this package is in (``spec/`` is :mod:`ecp.spec`)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: what the regeneration writes, relative to the root (the layouts folder besides)
GENERATED = ("spec/wiretypes", "spec/schema", "spec/PROTOCOL.md", "docs/compatibility.md")
REGENERATE_TIMEOUT_S = 300

_CHILD = """
import sys, types
root = sys.argv[1]
package = types.ModuleType("ecp")
package.__path__ = [root]   # ecp.spec is ROOT/spec: the copy's code and data, not the installed ones
sys.modules["ecp"] = package
from ecp.spec.diff.adopt import regenerate
sys.exit(regenerate(root))
"""


def _release(name: str) -> str:
    return name[len("vllm-"):] if name.startswith("vllm-") else name


def _release_key(name: str) -> tuple:
    parts = _release(name).split(".")
    return (1, tuple(int(p) for p in parts)) if all(p.isdigit() for p in parts) else (0, (), name)


def shipped(root: Path) -> dict[str, Layout]:
    """The layouts shipped in ``root``'s ``spec/layouts/``, oldest first, by name."""
    folder = root / "spec" / "layouts"
    names = sorted((p.stem for p in folder.glob("*.json")), key=_release_key)
    return {n: decode_layout((folder / f"{n}.json").read_bytes(), f"{n}.json") for n in names}


def clause_spans(layouts: dict[str, Layout]) -> dict[str, str]:
    """Each release-bound clause's span over ``layouts`` (``0.33``, ``0.28–0.33``, ``all``)."""
    from ..clauses import RELEASE_BOUND
    from ..releases import features_of

    releases = [_release(n) for n in layouts]
    features = {_release(n): features_of(layout) for n, layout in layouts.items()}
    out = {}
    for cid, needs in sorted(RELEASE_BOUND.items()):
        have = [r for r in releases if set(needs) <= features[r]]
        if not have:
            out[cid] = "none"
        elif have == releases:
            out[cid] = "all"
        else:
            first, last = releases.index(have[0]), releases.index(have[-1])
            out[cid] = (", ".join(have) if last - first + 1 != len(have)
                        else have[0] if first == last else f"{have[0]}–{have[-1]}")
    return out


def _digests(root: Path) -> dict[str, str]:
    out = {}
    for rel in ("spec/layouts", *GENERATED):
        path = root / rel
        for file in sorted(path.rglob("*") if path.is_dir() else [path]):
            if file.is_file() and "__pycache__" not in file.parts:
                out[file.relative_to(root).as_posix()] = hashlib.sha256(file.read_bytes()).hexdigest()
    return out


def regenerate(root: str | Path) -> int:
    """Rewrite every file generated from the shipped layouts under ``root`` (run in the child process
    that imports ``root``'s ``spec/`` as :mod:`ecp.spec`); 0 on success."""
    from ..schema import SCHEMA_DIR, render_schemas
    from ..tables import PROTOCOL_MD, refresh_protocol
    from .compat import compat_matrix, render_markdown
    from .observed import OBSERVED_PATH, load_observed
    from ..layout.resolve import load_shipped, shipped_names
    from ..wiretypes import write_modules

    root = Path(root)
    if SCHEMA_DIR.parent.resolve() != (root / "spec").resolve():
        print(f"regenerate: ecp.spec is {SCHEMA_DIR.parent}, not {root / 'spec'}", file=sys.stderr)
        return 2
    write_modules()
    for name, text in render_schemas().items():
        target = SCHEMA_DIR / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    text = PROTOCOL_MD.read_text(encoding="utf-8")
    fresh = refresh_protocol(text)
    if fresh != text:
        PROTOCOL_MD.write_text(fresh, encoding="utf-8")
    layouts = [load_shipped(n) for n in shipped_names()]
    observed = load_observed(OBSERVED_PATH) if OBSERVED_PATH.is_file() else None
    compat = root / "docs" / "compatibility.md"
    if compat.parent.is_dir():
        table = render_markdown(layouts, compat_matrix(layouts), observed)
        if not compat.is_file() or compat.read_text(encoding="utf-8") != table:
            compat.write_text(table, encoding="utf-8")
    return 0


def adopt(source: str, root: Path = PACKAGE_ROOT, version: str | None = None) -> dict[str, Any]:
    """Extract the layout of the vLLM wheel or checkout ``source``, ship it in ``root`` and regenerate
    (see the module docstring). Returns what the command prints: ``name``, ``previous``, ``findings``
    (the diff against the release before it, as text; for a new oldest release, what the one after it
    (``next``) changed), ``spans`` (clause -> (before, after), for the
    spans that moved) and ``changed`` (the files written, relative to ``root``). Raises
    :class:`LayoutError` for a source that is not a vLLM tree, names no release, or for a failed
    regeneration."""
    from ..layout.vllm import SourceError, extract
    from .compare import diff_layouts
    from .report import render

    try:
        layout = extract(source, version=version).layout
    except SourceError as exc:
        raise LayoutError(f"{source}: {exc}") from None
    if layout.name == "vllm-unknown":
        raise LayoutError(f"{source} records no version and no git commit: pass --vllm-version X.Y.Z")
    before_layouts = shipped(root)
    before = _digests(root)
    others = {n: lay for n, lay in before_layouts.items() if n != layout.name}
    earlier = [n for n in others if _release_key(n) < _release_key(layout.name)]
    later = [n for n in others if _release_key(n) > _release_key(layout.name)]
    previous = others[earlier[-1]] if earlier else None
    following = others[later[0]] if later and previous is None else None  # the oldest: what the next one changed
    target = root / "spec" / "layouts" / f"{layout.name}.json"
    target.write_bytes(encode_layout(layout))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(root)], capture_output=True, text=True,
                          timeout=REGENERATE_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise LayoutError(f"regenerating the files generated from the layouts failed (exit {proc.returncode}): "
                          f"{proc.stderr.strip()[-2000:]}")
    after = _digests(root)
    spans_before, spans_after = clause_spans(before_layouts), clause_spans(shipped(root))
    return {
        "name": layout.name,
        "previous": previous.name if previous is not None else None,
        "next": following.name if following is not None else None,
        "findings": (render("text", previous, layout, diff_layouts(previous, layout)) if previous is not None
                     else render("text", layout, following, diff_layouts(layout, following)) if following is not None
                     else ""),
        "spans": {c: (spans_before.get(c), s) for c, s in spans_after.items() if spans_before.get(c) != s},
        "changed": sorted(p for p in after.keys() | before.keys() if before.get(p) != after.get(p)),
    }


def print_adoption(result: dict[str, Any], as_json: bool = False) -> None:
    """What ``ecp spec release add`` says."""
    if as_json:
        print(json.dumps(result, indent=1, ensure_ascii=False))
        return
    name, previous = result["name"], result["previous"]
    print(f"adopted {name}" + (f" (after {previous})" if previous else " (the oldest shipped release)"))
    if result["findings"] and previous:
        print(f"\nwhat changed against {previous} (ecp spec diff {previous} {name}):")
    elif result["findings"]:
        print(f"\nwhat {result['next']} changed against it (ecp spec diff {name} {result['next']}):")
    if result["findings"]:
        print(result["findings"].rstrip())
    print("\nclause release spans that moved:" if result["spans"] else "\nno clause's release span moved")
    for cid, (was, now) in sorted(result["spans"].items()):
        print(f"  {cid}: {was} -> {now}")
    print("\nfiles written:" if result["changed"] else "\nno file changed (the release was already shipped as is)")
    for path in result["changed"]:
        print(f"  {path}")
