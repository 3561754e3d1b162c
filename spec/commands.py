"""Spec subcommands: ``ecp summary``, ``ecp decode``, ``ecp schema``, ``ecp vectors``.

``register`` only declares arguments; every handler imports what it needs.
Exit codes: 0 ok, 1 the checked thing failed (a frame that does not decode,
checked-in files that differ from the code), 2 usage or harness error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .diff.commands import register_spec
from .profile.option import add_release_option
from .version import VLLM_RELEASE, VLLM_VERSION

DIRECTIONS = ("auto", "input", "output", "handshake", "init", "ready", "coordinator")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("summary", help="print a summary of the protocol: sockets, messages, clauses")
    p.set_defaults(func=_summary)
    register_spec(subparsers)

    p = subparsers.add_parser(
        "decode", help="decode captured frames and print the typed message, or a clause-citing error",
        description="Decode one multipart message given as hex frames (each argument one frame, or "
                    "frames separated by spaces/commas/'|' in one argument; '-' reads them from stdin), "
                    "or every message of a capture file (--file: one message per line, or a vLLM dump "
                    "file). Prints JSON; exits 1 if any message does not decode.")
    p.add_argument("frames", nargs="*", help="hex frames, or '-' for stdin")
    p.add_argument("--file", type=Path, help="capture file: one message per line (hex frames) or a dump file")
    p.add_argument("--direction", choices=DIRECTIONS, default="auto",
                   help="where the frames were captured: input (engine DEALER: type, payload, *aux), "
                        "output (frontend PULL: payload, *aux), handshake (HELLO/READY), init, "
                        "ready (ready payload), coordinator (coordinator -> frontend publication), "
                        "or auto (guess)")
    p.add_argument("--compact", action="store_true", help="one JSON object per line")
    p.add_argument("--wire", action="store_true",
                   help="print array-like structs as arrays in wire order (default: maps keyed by field name)")
    add_release_option(p, "decode as this vLLM release speaks", auto="the release the frames fit best",
                       default=None, effect=f"Without it, frames decode as vLLM {VLLM_RELEASE}. When the frames "
                                            "fit another release better, stderr says which and why.")
    p.set_defaults(func=_decode)

    p = subparsers.add_parser("schema", help="write (or --check) the JSON Schema of every message kind")
    p.add_argument("--out", type=Path, default=None, help="directory (default: spec/schema in the package)")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if the files in --out differ from the code")
    p.set_defaults(func=_schema)

    p = subparsers.add_parser("vectors", help="extract (or --check) the golden vectors from vLLM 0.33 dumps")
    p.add_argument("--src", type=Path, default=None,
                   help="directory with the vLLM dump files the vectors are extracted from")
    p.add_argument("--out", type=Path, default=None, help="directory (default: spec/vectors in the package)")
    p.add_argument("--check", action="store_true",
                   help="do not write; with --src, exit 1 if the files in --out differ from a fresh "
                        "extraction; without it, exit 1 unless every vector in --out decodes to its recorded "
                        "value and every Python-encoded one re-encodes byte for byte")
    p.set_defaults(func=_vectors)


# --------------------------------------------------------------------------- summary
def _summary(args: argparse.Namespace) -> int:
    import msgspec

    from . import clauses
    from .enums import RequestType
    from .handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
    from .outputs import EngineCoreOutput, EngineCoreOutputs, UtilityOutput
    from .request import EngineCoreRequest
    from .sampling import SamplingParams
    from .tables import wire_shape

    print(f"engine-core protocol, pinned to vLLM {VLLM_VERSION} (ZeroMQ + msgpack)\n")
    print("input frames (frontend ROUTER -> engine DEALER): [identity(2), type(1), payload, *aux]")
    for t in RequestType:
        print(f"  0x{t.value.hex()} {t.name:<16} {'on the wire' if t.on_wire else 'engine-internal, never sent'}")
    print("output frames (engine PUSH -> frontend PULL): [payload, *aux] or ENGINE_CORE_DEAD\n")
    for typ in (Hello, Ready, EngineHandshakeMetadata, EngineCoreReadyResponse, EngineCoreRequest,
                SamplingParams, EngineCoreOutputs, EngineCoreOutput, UtilityOutput):
        enc = "array" if msgspec.inspect.type_info(typ).array_like else "map"
        print(f"  {typ.__name__:<26} {enc:<5} {wire_shape(typ)}")  # the words of spec/PROTOCOL.md
    print()
    by_area: dict[str, int] = {}
    for c in clauses.CLAUSES.values():
        by_area[c.area] = by_area.get(c.area, 0) + 1
    print(f"{len(clauses.CLAUSES)} numbered clauses: " + ", ".join(f"{a} {n}" for a, n in by_area.items()))
    protocol_md = Path(clauses.__file__).with_name("PROTOCOL.md")
    print(f"full text: {protocol_md}; decode a frame: ecp decode --help")
    return 0


# --------------------------------------------------------------------------- decode
def _decode(args: argparse.Namespace) -> int:
    import json
    import sys

    from .clauses import CLAUSES
    from .errors import ProtocolError
    from .frames import decode_frames, parse_hex_frames

    messages: list[tuple[str, list[bytes] | ProtocolError, str]] = []  # (label, frames|error, direction)
    if args.file is not None:
        if args.frames:
            print("ecp decode: give frames or --file, not both", file=sys.stderr)
            return 2
        try:
            lines = args.file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            print(f"ecp decode: cannot read {args.file}: {exc}", file=sys.stderr)
            return 2
        except UnicodeDecodeError as exc:
            print(f"ecp decode: {args.file} is not a text capture (byte 0x{exc.object[exc.start]:02x} at offset "
                  f"{exc.start} is not UTF-8): --file reads text, hex frames one message per line or a vLLM dump file", file=sys.stderr)
            return 2
        from .golden import looks_like_capture, scan_capture

        if looks_like_capture(lines):
            for blob in scan_capture(lines, args.file.name):
                direction = args.direction if args.direction != "auto" else blob.direction
                messages.append((f"{args.file.name}:{blob.line}", blob.frames, direction))
        else:
            for no, line in enumerate(lines, 1):
                if line.strip() and not line.lstrip().startswith("#"):
                    try:
                        messages.append((f"{args.file.name}:{no}", parse_hex_frames(line), args.direction))
                    except ProtocolError as exc:
                        messages.append((f"{args.file.name}:{no}", exc, args.direction))
    else:
        text = " ".join(args.frames)
        if args.frames == ["-"]:
            text = sys.stdin.read()
        if not text.strip():
            print("ecp decode: no frames given (hex arguments, '-' for stdin, or --file)", file=sys.stderr)
            return 2
        try:
            messages.append(("ecp decode" if args.frames != ["-"] else "stdin", parse_hex_frames(text), args.direction))
        except ProtocolError as exc:
            messages.append(("ecp decode", exc, args.direction))

    profile = None
    if args.vllm is not None:
        profile, code = _decode_profile(args.vllm, messages)
        if profile is None:
            return code
    failed = 0
    indent = None if args.compact or len(messages) > 1 else 2
    for label, frames, direction in messages:
        try:
            if isinstance(frames, ProtocolError):
                raise frames
            if profile is not None and direction != "coordinator":  # (no release layout has the coordinator's)
                decoded = profile.codec.decode_frames(frames, direction)
            else:
                decoded = decode_frames(frames, direction)
            out = decoded.to_dict(named=not args.wire)
        except ProtocolError as exc:
            failed += 1
            out = exc.to_dict()
            clause = CLAUSES.get(exc.clause)
            if clause is not None:
                out["clause_level"] = clause.level
                out["clause_title"] = clause.title
            print(f"{label}: {exc}", file=sys.stderr)
        if len(messages) > 1:
            out = {"at": label, **out}
        print(json.dumps(out, indent=indent, ensure_ascii=False))
    return 1 if failed else 0


def _decode_profile(reference: str, messages: list) -> tuple[object | None, int]:
    """The profile ``--vllm`` names (``auto``: the release the frames fit best), and the exit
    status when there is none. Says on stderr when the frames fit another release better."""
    import sys

    from .frames import guess_directions
    from .layout.model import LayoutError
    from .profile import resolve_profile, shipped_profile
    from .profile.fingerprint import Fingerprint

    fingerprint = Fingerprint()
    for _, frames, direction in messages:
        if isinstance(frames, list) and frames:
            fingerprint.observe(frames, direction if direction != "auto" else guess_directions(frames)[0])
    verdict = fingerprint.verdict()
    if reference == "auto":
        if verdict.release is None:
            print("ecp decode: --vllm auto: nothing in these frames tells the release apart; "
                  "pass --vllm RELEASE", file=sys.stderr)
            return None, 2
        print(f"ecp decode: {verdict.sentence(peer='peer')}: decoding as vLLM {verdict.release}", file=sys.stderr)
        return shipped_profile(verdict.release), 0
    try:
        profile = resolve_profile(reference)
    except LayoutError as exc:
        print(f"ecp decode: --vllm: {exc}", file=sys.stderr)
        return None, 2
    fingerprint.under_test = profile  # judged against the release named first, whatever it is
    sentence = fingerprint.verdict().sentence(peer="peer", under_test=profile.release)
    if sentence:
        print(f"ecp decode: {sentence}", file=sys.stderr)
    return profile, 0


# --------------------------------------------------------------------------- schema / vectors
def _check_or_write(expected: dict[str, str], out: Path, check: bool, what: str, regen: str) -> int:
    import sys

    if check:
        problems = []
        for name, text in sorted(expected.items()):
            path = out / name
            if not path.exists():
                problems.append(f"missing {path}")
            elif path.read_text(encoding="utf-8") != text:
                problems.append(f"differs from the code: {path}")
        extra = sorted(p.name for p in out.glob("*.json") if p.name not in expected) if out.exists() else []
        problems += [f"not produced by the code: {out / n}" for n in extra]
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print(f"{what} out of date; regenerate with: {regen}", file=sys.stderr)
            return 1
        print(f"{len(expected)} {what} files up to date in {out}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in expected.items():
        (out / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(expected)} {what} files to {out}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    import sys

    from .schema import SCHEMA_DIR, render_schemas
    from .tables import PROTOCOL_MD, refresh_protocol

    out = args.out or SCHEMA_DIR
    rc = _check_or_write(render_schemas(), out, args.check, "schema", "ecp schema")
    if args.out is None and PROTOCOL_MD.exists():
        # The field tables of PROTOCOL.md are generated from the same types.
        text = PROTOCOL_MD.read_text(encoding="utf-8")
        fresh = refresh_protocol(text)
        if args.check and fresh != text:
            print(f"field tables in {PROTOCOL_MD} differ from the code; regenerate with: ecp schema",
                  file=sys.stderr)
            rc = 1
        elif not args.check and fresh != text:
            PROTOCOL_MD.write_text(fresh, encoding="utf-8")
            print(f"refreshed the field tables in {PROTOCOL_MD}")
    return rc


def _vectors(args: argparse.Namespace) -> int:
    import sys

    from .golden import VECTORS_DIR, check_vectors, dump_documents, extract

    out = args.out or VECTORS_DIR
    if args.src is None:
        if not args.check:
            print("ecp vectors: pass --src DIR, the directory with the vLLM dump files to extract from "
                  "(or --check to check the vectors against the codec)", file=sys.stderr)
            return 2
        try:
            count, problems = check_vectors(out)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # not a vector file (JSON, not ours)
            print(f"ecp vectors: {out} does not hold vector files ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        for line in problems:
            print(line, file=sys.stderr)
        if problems or not count:
            print(f"ecp vectors: {len(problems)} of {count} vector(s) in {out} do not hold", file=sys.stderr)
            return 1
        print(f"{count} vectors in {out} decode to their recorded values and the Python-encoded ones "
              "re-encode byte for byte (--src DIR also re-extracts them from the vLLM dumps)")
        return 0
    src = args.src
    if not src.is_dir():
        print(f"ecp vectors: no dump directory at {src} (pass --src)", file=sys.stderr)
        return 2
    return _check_or_write(dump_documents(extract(src)), out, args.check, "vector",
                           "ecp vectors --src <dir with the vllm-0.33 dumps>")
