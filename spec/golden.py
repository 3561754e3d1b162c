"""Golden vectors: real vLLM 0.33 bytes, the value they decode to, and where they came from.

The vectors live as JSON data under ``spec/vectors/`` (one file per source
dump) and are produced by :func:`extract` from the capture files in
``shared/protocol/vllm-0.33/`` (``ecp vectors --src DIR``). Each vector is::

    {"name": "...", "kind": "add", "frames": ["00", "dc0016…"],
     "value": <JSON view of the decoded payload>,
     "producer": "python-encoder", "reencode": true,
     "source": {"file": "encoder-dump.txt", "line": 214, "section": "3b. normal request …"}}

``frames`` are hex, as the receiving socket sees them (no identity frame).
``producer`` says whose encoder wrote the bytes: ``python-encoder`` (vLLM's own
``MsgpackEncoder``), ``python-frontend`` / ``python-engine`` (a running vLLM
0.33 process), ``vllm-rs`` (the Rust frontend), ``foreign-frontend`` /
``foreign-engine`` (minimal peers written without vLLM, used to capture the
others). ``reencode`` is true exactly for bytes vLLM's Python encoder wrote:
:mod:`ecp.spec` must reproduce those byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .frames import KIND_DIRECTION, decode_frames

VECTORS_DIR = Path(__file__).resolve().parent / "vectors"
SOURCE_FILES = (
    "encoder-dump.txt",
    "traffic-python-frontend-to-engine.txt",
    "traffic-engine-to-foreign-frontend.txt",
    "traffic-vllm-rs-to-engine.txt",
)
#: Captures kept in this repository, under :data:`CAPTURES_DIR`: written by a script run against
#: vLLM 0.33 (``spec/vectors/captures/make_tensor_dump.py``: logprob tensors inline and in aux
#: frames, a multimodal ADD with an aux frame), in the encoder-dump format.
LOCAL_SOURCE_FILES = ("tensor-dump.txt",)
CAPTURES_DIR = VECTORS_DIR / "captures"
#: Producers whose bytes came from vLLM's Python ``MsgpackEncoder`` / msgspec.
PYTHON_PRODUCERS = frozenset({"python-encoder", "python-frontend", "python-engine"})

# Who wrote SENT / RECV lines in each traffic capture (the capture's own perspective).
_TRAFFIC_PRODUCERS = {
    "traffic-python-frontend-to-engine.txt": {"SENT": "foreign-engine", "RECV": "python-frontend"},
    "traffic-engine-to-foreign-frontend.txt": {"SENT": "foreign-frontend", "RECV": "python-engine"},
    "traffic-vllm-rs-to-engine.txt": {"SENT": "foreign-engine", "RECV": "vllm-rs"},
}

_HEX = r"([0-9a-f]{2,})"
_SECTION_RE = re.compile(r"^(\d+)\. ")
_TITLE_RE = re.compile(r"^(\S.*)$")
_FRAME_RE = re.compile(r"^\s+frame\[(\d+)\] \d+ bytes hex=" + _HEX + r"\s*$")
_PAYLOAD_RE = re.compile(r"^\s+hex: " + _HEX + r"\s*$")
_INLINE_RE = re.compile(r"^(?P<title>default SamplingParams\(\)) encodes to: " + _HEX)


@dataclass
class Vector:
    name: str
    kind: str
    frames: list[bytes]
    value: Any
    producer: str
    reencode: bool
    source: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "frames": [f.hex() for f in self.frames],
                "value": self.value, "producer": self.producer, "reencode": self.reencode,
                "source": self.source}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Vector":
        return cls(d["name"], d["kind"], [bytes.fromhex(f) for f in d["frames"]], d["value"],
                   d["producer"], d["reencode"], d["source"])

    @property
    def direction(self) -> str:
        return KIND_DIRECTION[self.kind]


# --------------------------------------------------------------------------- extraction
def _encoder_dump_blobs(lines: list[str]) -> Iterator[tuple[int, str, str, list[bytes]]]:
    """Yield ``(line, section, title, frames)`` for every byte dump in encoder-dump.txt."""
    section = title = ""
    pending: dict[str, Any] | None = None

    def flush():
        nonlocal pending
        if pending and (pending["frames"] or pending["payload"]):
            frames = pending["frames"] or [pending["payload"]]
            yield pending["line"], section, pending["title"], frames
        pending = None

    for no, line in enumerate(lines, 1):
        if line.startswith("====="):
            continue
        m = _SECTION_RE.match(line)
        if m and not line.startswith(" "):
            yield from flush()
            section = line.strip()
            continue
        m = _INLINE_RE.match(line)
        if m:
            yield from flush()
            yield no, section, m.group("title"), [bytes.fromhex(m.group(2))]
            continue
        m = _FRAME_RE.match(line)
        if m and pending is not None:
            pending["frames"].append(bytes.fromhex(m.group(2)))
            pending["line"] = pending["line"] or no
            continue
        m = _PAYLOAD_RE.match(line)
        if m and pending is not None:
            pending["payload"] = bytes.fromhex(m.group(1))
            pending["line"] = pending["line"] or no
            continue
        if _TITLE_RE.match(line) and not line.startswith(("NOTE", "round-trip", "engine identity")):
            yield from flush()
            pending = {"title": line.strip(), "frames": [], "payload": None, "line": 0}
    yield from flush()


def _dump_kind_frames(section: str, title: str, frames: list[bytes]) -> tuple[str | None, list[bytes]]:
    """Map an encoder-dump blob onto ``(direction, frames as the receiver sees them)``."""
    num = section.split(".")[0]
    if title.startswith("default SamplingParams"):
        return None, frames  # a bare SamplingParams map; not a message of its own
    if num == "3":
        return "input", [b"\x00", frames[0]]
    if num == "4":
        if len(frames) == 3 and len(frames[0]) == 2:  # ROUTER view: drop the identity frame
            return "input", frames[1:]
        if len(frames) >= 2 and len(frames[0]) == 1:  # the DEALER's view: type, payload, aux frames
            return "input", frames
        type_byte = {"UTILITY": b"\x03", "ADD": b"\x00", "ABORT": b"\x01"}[title.split()[0]]
        return "input", [type_byte, frames[0]]
    if num == "5":
        return "output", frames
    if num == "6":
        if title.startswith(("HELLO", "READY")):
            return "handshake", frames
        if title.startswith("INIT"):
            return "init", frames
        if title.startswith("ready payload"):
            return "ready", frames
    raise ValueError(f"unclassified encoder-dump blob in section {section!r}: {title!r}")


_TRAFFIC_RE = re.compile(r"^(?P<who>SENT|RECV) (?P<what>.*?)(?:payload=|\[1\]=|\s)" + _HEX
                         + r"(?:\s+\{.*\})?\s*$")
_TYPE_RE = re.compile(r"type=([0-9a-f]{2})")


def _traffic_blobs(lines: list[str]) -> Iterator[tuple[int, str, str, str | None, list[bytes]]]:
    """Yield ``(line, SENT|RECV, description, direction, frames)`` for a traffic capture."""
    for no, line in enumerate(lines, 1):
        m = _TRAFFIC_RE.match(line)
        if not m:
            continue
        who, what, payload = m.group("who"), m.group("what").strip(), bytes.fromhex(m.group(3))
        t = _TYPE_RE.search(what)
        if t:
            yield no, who, what, "input", [bytes.fromhex(t.group(1)), payload]
        elif what.startswith("output"):
            yield no, who, what, "output", [payload]
        elif "INIT" in what:
            yield no, who, what, "init", [payload]
        elif "ready payload" in what or "EngineCoreReadyResponse" in what:
            yield no, who, what, "ready", [payload]
        elif what.startswith(("HELLO", "READY", "handshake")):
            yield no, who, what, "handshake", [payload]
        else:
            raise ValueError(f"unclassified traffic line {no}: {line[:80]!r}")


@dataclass
class Blob:
    """One message found in a capture file, not yet decoded."""

    line: int
    section: str
    name: str
    direction: str
    frames: list[bytes]
    producer: str


def looks_like_capture(lines: list[str]) -> bool:
    """Whether ``lines`` are in one of the vLLM dump formats (else: one hex message per line)."""
    return any(_TRAFFIC_RE.match(l) or _PAYLOAD_RE.match(l) or _FRAME_RE.match(l) for l in lines)


def scan_capture(lines: list[str], file_name: str = "") -> list[Blob]:
    """Every byte dump in a capture file (encoder-dump or traffic format)."""
    out: list[Blob] = []
    if any(_SECTION_RE.match(l) for l in lines) and not any(_TRAFFIC_RE.match(l) for l in lines):
        for no, section, title, frames in _encoder_dump_blobs(lines):
            direction, frames = _dump_kind_frames(section, title, frames)
            if direction is not None:
                out.append(Blob(no, section, title, direction, frames, "python-encoder"))
        return out
    producers = _TRAFFIC_PRODUCERS.get(file_name, {"SENT": "unknown", "RECV": "unknown"})
    for no, who, what, direction, frames in _traffic_blobs(lines):
        out.append(Blob(no, who, f"{who} {what}".strip(), direction, frames, producers[who]))
    return out


def _describe(decoded: Any) -> str:
    body = decoded.body
    if decoded.kind == "utility":
        return f" {body.method_name}{tuple(body.args)!r}" if body.args else f" {body.method_name}()"
    if decoded.kind == "add":
        return f" {body.request_id}"
    return ""


def extract_file(path: Path) -> list[Vector]:
    """Every byte dump in one capture file, decoded, as vectors."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Vector] = []
    for blob in scan_capture(lines, path.name):
        decoded = decode_frames(blob.frames, blob.direction)
        name = blob.name if blob.producer == "python-encoder" else blob.name + _describe(decoded)
        out.append(Vector(name, decoded.kind, list(decoded.frames), decoded.value, blob.producer,
                          blob.producer in PYTHON_PRODUCERS,
                          {"file": path.name, "line": blob.line, "section": blob.section}))
    return out


def extract(source_dir: Path) -> dict[str, dict[str, Any]]:
    """Vector documents for every file of :data:`SOURCE_FILES` (in ``source_dir``) and of
    :data:`LOCAL_SOURCE_FILES` (in :data:`CAPTURES_DIR`), keyed by output file name."""
    docs = {}
    sources = [(Path(source_dir) / name, f"shared/protocol/vllm-0.33/{name}") for name in SOURCE_FILES]
    sources += [(CAPTURES_DIR / name, f"spec/vectors/captures/{name}") for name in LOCAL_SOURCE_FILES]
    for path, source in sources:
        name = path.name
        raw = path.read_bytes()
        vectors = extract_file(path)
        docs[name.replace(".txt", ".json")] = {
            "source": source,
            "source_sha256": hashlib.sha256(raw).hexdigest(),
            "vllm_version": "0.33.0",
            "vectors": [v.to_json() for v in vectors],
        }
    return docs


def dump_documents(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Serialise vector documents exactly as they are checked in."""
    return {name: json.dumps(doc, indent=1, ensure_ascii=False) + "\n" for name, doc in docs.items()}


# --------------------------------------------------------------------------- loading
def load_documents(directory: Path = VECTORS_DIR) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(Path(directory).glob("*.json"))}


def load_vectors(directory: Path = VECTORS_DIR) -> list[Vector]:
    """Every checked-in golden vector, in file then capture order."""
    return [Vector.from_json(v) for doc in load_documents(directory).values() for v in doc["vectors"]]


def check_vectors(directory: Path = VECTORS_DIR) -> tuple[int, list[str]]:
    """Check vectors against the codec, without the dumps they came from: each decodes to its
    recorded kind and value, and each one vLLM's Python encoder wrote re-encodes byte for byte.

    Returns the number of vectors checked and one line per vector that does not hold."""
    import msgspec

    from .errors import ProtocolError
    from .frames import encode_decoded

    vectors = load_vectors(directory)
    problems = []
    for v in vectors:
        where = f"{v.source.get('file')}:{v.source.get('line')} ({v.name})"
        try:
            decoded = decode_frames(v.frames, v.direction)
        except ProtocolError as exc:
            problems.append(f"{where}: does not decode: {exc}")
            continue
        if decoded.kind != v.kind:
            problems.append(f"{where}: decodes as {decoded.kind}, recorded as {v.kind}")
        elif msgspec.json.decode(msgspec.json.encode(decoded.value)) != v.value:
            problems.append(f"{where}: decodes to another value than the recorded one")
        elif v.reencode and encode_decoded(decoded) != v.frames:
            problems.append(f"{where}: re-encodes to other bytes")
    return len(vectors), problems
