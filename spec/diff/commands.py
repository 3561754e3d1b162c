"""``ecp spec layout``, ``ecp spec diff``, ``ecp spec compat``, ``ecp spec types``, ``ecp spec release``.

Only argparse declarations live at module level; the work is imported inside
the handlers. Exit codes: 0 ok, 1 the check failed (breaking findings, a
stale checked-in file), 2 usage error (a reference that names no layout).
"""

from __future__ import annotations

import argparse
import sys


def register_spec(subparsers: argparse._SubParsersAction) -> None:
    spec = subparsers.add_parser("spec", help="protocol layouts: snapshot, diff between releases, compatibility")
    sub = spec.add_subparsers(dest="spec_command", metavar="SPEC_COMMAND")
    spec.set_defaults(func=_usage, spec_parser=spec)

    p = sub.add_parser(
        "layout", help="write a layout as JSON: of vLLM's sources (--from-vllm), of a Rust crate (--from-rust) "
                       "or of ecp.spec",
        description="With --from-vllm, extract the wire layout statically (Python ast; nothing of vLLM is "
                    "imported) from a vLLM source checkout, an unpacked wheel or a .whl file. Without it, "
                    "describe the messages of ecp.spec itself. Constructs that cannot be resolved statically "
                    "are reported on stderr as file:line: code: message and recorded in the layout's "
                    "provenance; exit 1 with --strict when there are any.")
    p.add_argument("--from-vllm", metavar="PATH", dest="from_vllm",
                   help="a vLLM checkout (the directory holding vllm/), an unpacked wheel or a .whl file")
    p.add_argument("--from-rust", metavar="DIR", dest="from_rust",
                   help="a Rust crate or source directory: its serde definitions of the protocol (tree-sitter; "
                        "needs the rust extra)")
    p.add_argument("--role", choices=("frontend", "engine"), default=None,
                   help="with --from-rust: the part the crate plays (default: frontend)")
    p.add_argument("--name", action="append", default=[], metavar="RUST=PYTHON",
                   help="with --from-rust: describe Rust type RUST under the Python class name PYTHON "
                        "(repeatable; a doc comment naming the Python class does the same)")
    p.add_argument("--vllm-version", metavar="X.Y.Z", dest="vllm_version",
                   help="the release the tree is (for a checkout that does not record its version)")
    p.add_argument("--out", metavar="FILE", help="where to write it (default: stdout)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out differs from the output")
    p.add_argument("--strict", action="store_true", help="exit 1 when the extractor met anything it could not "
                                                         "resolve statically")
    p.set_defaults(func=_layout)

    p = sub.add_parser(
        "diff", help="compare two layouts; exit 1 on breaking changes",
        description="Each side is a layout file (e.g. written by `ecp spec layout --from-vllm` or --from-rust), a shipped "
                    "layout name (vllm-X.Y: `ecp spec release list`), 'current' (ecp.spec's own types) or a git ref of "
                    "this repository (REF or REF:PATH; REF alone reads the newest shipped layout at that ref). "
                    "Each finding names its rule (DIFF-nnn), the clause of spec/PROTOCOL.md it violates, "
                    "the peers it hurts, where it is written (file:line) and a one-line fix. When exactly one side "
                    "was read from Rust, the two are compared as peers: the Rust crate in its role against vLLM.",
        epilog="Exit status: 0 when no finding reaches --fail-on, 1 when one does, 2 when a reference names "
               "no layout.")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--format", choices=("text", "json", "markdown", "github"), default="text",
                   help="text for people, json for tools, markdown for a pull-request comment, github for "
                        "workflow annotations")
    p.add_argument("--fail-on", choices=("breaking", "warning", "never"), default="breaking",
                   help="lowest severity that makes the exit status 1 (default: breaking)")
    p.add_argument("--strict", action="store_true",
                   help="also exit 1 on warnings: warning findings, and extraction warnings NEW records that "
                        "OLD does not (a construct the change made unreadable)")
    p.set_defaults(func=_diff)

    p = sub.add_parser("compat", help="the cross-version interoperability table (Markdown)")
    p.add_argument("--out", metavar="FILE", help="write it here (default: stdout)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out differs from the output")
    p.add_argument("--layouts", nargs="+", metavar="REF",
                   help="layouts to pair (default: every shipped release)")
    p.add_argument("--observed", metavar="FILE",
                   help="the executed cross-release matrix to show beside the prediction (default, without "
                        "--layouts: spec/compat/observed-cross.json, written by lab/interop_matrix.py "
                        "--cross; 'none': leave it out)")
    p.set_defaults(func=_compat)

    p = sub.add_parser(
        "types", help="write (or --check) the generated wire types of every shipped layout (spec/wiretypes/)",
        description="Render every shipped layout (spec/layouts/vllm-X.Y.json) with the hand-written notes of "
                    "spec/overlay.py as a module of msgspec Structs and IntEnums in spec/wiretypes/ "
                    "(ecp.spec.layout.codegen). --check writes nothing and exits 1 naming every module that "
                    "differs, is missing or belongs to no shipped layout.")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a module is stale")
    p.set_defaults(func=_types)

    p = sub.add_parser("release", help="the shipped vLLM releases: list them, or adopt one (add --from-vllm)")
    rel = p.add_subparsers(dest="release_command", metavar="RELEASE_COMMAND")
    p.set_defaults(func=_usage, spec_parser=p)
    q = rel.add_parser("list", help="the shipped releases, oldest first (what --vllm takes by name)")
    q.set_defaults(func=_release_list)
    q = rel.add_parser(
        "add", help="adopt a vLLM release: extract and ship its layout, regenerate everything generated",
        description="Extract the layout of a vLLM wheel or checkout, write it to spec/layouts/vllm-X.Y.json and "
                    "regenerate the files generated from the shipped layouts (spec/schema/, PROTOCOL.md's "
                    "generated blocks and release spans, docs/compatibility.md); print what changed against "
                    "the release before it and which clauses' release spans moved. Adopting a release that is "
                    "already shipped rewrites its layout from the source.")
    q.add_argument("--from-vllm", metavar="PATH", dest="from_vllm", required=True,
                   help="a vLLM .whl, an unpacked wheel or a checkout")
    q.add_argument("--vllm-version", metavar="X.Y.Z", dest="vllm_version",
                   help="the release the tree is (for a checkout that records no version)")
    q.add_argument("--root", metavar="DIR", help="the repository to adopt it into (default: the one ecp.spec is in)")
    q.add_argument("--json", action="store_true", help="print the result as JSON")
    q.set_defaults(func=_release_add)

    p = sub.add_parser(
        "sentences", help="the normative sentences of spec/PROTOCOL.md with their ids; --check, --number",
        description="List every normative sentence of spec/PROTOCOL.md (id, level, text). --check exits 1 "
                    "naming every normative sentence without an id and every disagreement with the ledger "
                    "spec/sentences.txt; --number gives each sentence without an id the next free number of "
                    "its clause and records it (rules: ecp.spec.sentences).")
    p.add_argument("--check", action="store_true", help="exit 1 if a sentence lacks an id or the ledger disagrees")
    p.add_argument("--number", action="store_true", help="number the sentences without an id, update the ledger")
    p.add_argument("--json", action="store_true", help="print the sentences as JSON")
    p.add_argument("--protocol", metavar="FILE", help="the PROTOCOL.md to read (default: the package's)")
    p.add_argument("--ledger", metavar="FILE", help="the ledger (default: spec/sentences.txt beside it)")
    p.set_defaults(func=_sentences)


def _release_list(args: argparse.Namespace) -> int:
    from ..profile import shipped_profile, shipped_releases

    for release in shipped_releases():
        print(f"{release}  (vLLM {shipped_profile(release).vllm_version})")
    return 0


def _release_add(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..layout.model import LayoutError
    from .adopt import PACKAGE_ROOT, adopt, print_adoption

    root = Path(args.root) if args.root else PACKAGE_ROOT
    if not (root / "spec" / "layouts").is_dir():
        print(f"ecp spec release add: {root} holds no spec/layouts/", file=sys.stderr)
        return 2
    try:
        result = adopt(args.from_vllm, root, args.vllm_version)
    except LayoutError as exc:
        print(f"ecp spec release add: {exc}", file=sys.stderr)
        return 2
    print_adoption(result, as_json=args.json)
    return 0


def _sentences(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from .. import sentences as S

    protocol = Path(args.protocol) if args.protocol else S.PROTOCOL_MD
    ledger_path = Path(args.ledger) if args.ledger else protocol.with_name(S.LEDGER.name)
    text = protocol.read_text(encoding="utf-8")
    try:
        ledger = S.read_ledger(ledger_path.read_text(encoding="utf-8") if ledger_path.is_file() else "")
        if args.number:
            new_text, new_ledger, changes = S.number(text, ledger)
            if new_text != text:
                protocol.write_text(new_text, encoding="utf-8")
            if new_ledger != ledger or not ledger_path.is_file():
                ledger_path.write_text(S.write_ledger(new_ledger), encoding="utf-8")
            for line in changes:
                print(line)
            print(f"{len(changes)} change(s); {protocol} and {ledger_path} are numbered", file=sys.stderr)
            text, ledger = new_text, new_ledger
    except S.SentenceError as exc:
        print(f"ecp spec sentences: {exc}", file=sys.stderr)
        return 1
    if args.check:
        problems = S.check(text, ledger)
        for line in problems:
            print(line)
        print(f"{len(problems)} problem(s)" + ("; `ecp spec sentences --number` numbers sentences without an id"
                                              if problems else ""), file=sys.stderr)
        return 1 if problems else 0
    if not args.number:
        parsed = S.parse(text)
        if args.json:
            print(json.dumps([s.to_dict() for s in parsed.sentences + parsed.unnumbered], indent=1))
        else:
            for s in parsed.sentences + parsed.unnumbered:
                print(f"{s.id or '(no id)':<18} {s.level:<6} {s.text}")
    return 0


def _types(args: argparse.Namespace) -> int:
    from ..wiretypes import HERE, write_modules

    changes = write_modules(check=args.check)
    if args.check and changes:
        for change in changes:
            print(change, file=sys.stderr)
        print("wire types out of date; regenerate with: ecp spec types", file=sys.stderr)
        return 1
    for change in changes:
        print(f"rewrote ({change})")
    print(f"wire types {'up to date' if args.check or not changes else 'written'} in {HERE}")
    return 0


def _usage(args: argparse.Namespace) -> int:
    args.spec_parser.print_help()
    return 2


def _write_or_check(text: bytes, out: str | None, check: bool, what: str) -> int:
    from pathlib import Path

    if out in (None, "-") and not check:
        sys.stdout.write(text.decode())
        return 0
    if out in (None, "-"):
        print(f"--check needs a file to compare {what} with", file=sys.stderr)
        return 2
    path = Path(out)
    if check:
        current = path.read_bytes() if path.is_file() else None
        if current != text:
            print(f"{path} is out of date; regenerate it with the same command without --check", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _layout(args: argparse.Namespace) -> int:
    from ..layout.model import encode_layout

    if args.from_rust is not None:
        return _layout_rust(args)
    if args.role or args.name:
        print("ecp spec layout: --role and --name apply to --from-rust only", file=sys.stderr)
        return 2
    if args.from_vllm is None:
        if args.vllm_version or args.strict:
            print("ecp spec layout: --vllm-version and --strict apply to --from-vllm only", file=sys.stderr)
            return 2
        from ..layout.introspect import current_layout_json

        return _write_or_check(current_layout_json(), args.out, args.check, "the layout")
    from ..layout.vllm import SourceError, extract

    try:
        result = extract(args.from_vllm, version=args.vllm_version)
    except SourceError as exc:
        print(f"ecp spec layout: {exc}", file=sys.stderr)
        return 2
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    code = _write_or_check(encode_layout(result.layout), args.out, args.check, "the layout")
    if code == 0 and args.strict and result.warnings:
        print(f"ecp spec layout: {len(result.warnings)} construct(s) not resolved statically (--strict)",
              file=sys.stderr)
        return 1
    return code


def _layout_rust(args: argparse.Namespace) -> int:
    from ..layout.model import encode_layout
    from ..layout.rust import RustSourceError, extract_rust

    if args.from_vllm is not None:
        print("ecp spec layout: --from-vllm and --from-rust exclude each other", file=sys.stderr)
        return 2
    names = {}
    for pair in args.name:
        rust, sep, python = pair.partition("=")
        if not sep or not rust.isidentifier() or not python.isidentifier():
            print(f"ecp spec layout: --name {pair!r} is not RUST=PYTHON", file=sys.stderr)
            return 2
        names[rust] = python
    try:
        result = extract_rust(args.from_rust, names=names, role=args.role or "frontend",
                              vllm_version=args.vllm_version)
    except RustSourceError as exc:
        print(f"ecp spec layout: {exc}", file=sys.stderr)
        return 2
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    code = _write_or_check(encode_layout(result.layout), args.out, args.check, "the layout")
    if code == 0 and args.strict and result.warnings:
        print(f"ecp spec layout: {len(result.warnings)} construct(s) not read (--strict)", file=sys.stderr)
        return 1
    return code


def _diff(args: argparse.Namespace) -> int:
    from ..layout.model import LayoutError
    from ..layout.resolve import resolve
    from .compare import counts, diff_layouts, new_warnings
    from .report import render

    try:
        old, new = resolve(args.old), resolve(args.new)
    except LayoutError as exc:
        print(f"ecp spec diff: {exc}", file=sys.stderr)
        return 2
    findings = diff_layouts(old, new)
    sys.stdout.write(render(args.format, old, new, findings))
    c = counts(findings)
    if args.strict:
        introduced = new_warnings(old, new)
        for w in introduced:
            print(f"warning: {w} (not in {old.name})", file=sys.stderr)
        return 1 if c["breaking"] or c["warning"] or introduced else 0
    if args.fail_on == "breaking":
        return 1 if c["breaking"] else 0
    if args.fail_on == "warning":
        return 1 if c["breaking"] or c["warning"] else 0
    return 0


def _compat(args: argparse.Namespace) -> int:
    from ..layout.model import LayoutError
    from ..layout.resolve import resolve, shipped_names
    from .compat import compat_matrix, render_markdown

    try:
        layouts = [resolve(ref) for ref in (args.layouts or shipped_names())]
    except LayoutError as exc:
        print(f"ecp spec compat: {exc}", file=sys.stderr)
        return 2
    from .observed import OBSERVED_PATH, load_observed

    observed = None
    try:
        if args.observed not in (None, "none"):
            observed = load_observed(args.observed)
        elif args.observed is None and not args.layouts and OBSERVED_PATH.is_file():
            observed = load_observed(OBSERVED_PATH)
    except LayoutError as exc:
        print(f"ecp spec compat: {exc}", file=sys.stderr)
        return 2
    text = render_markdown(layouts, compat_matrix(layouts), observed).encode()
    return _write_or_check(text, args.out, args.check, "the table")
