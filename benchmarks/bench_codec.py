"""What the sans-IO codec costs over msgspec itself, per message (``ecp.spec``).

Run: ``python -m benchmarks.bench_codec`` (``--rounds``, ``--round-ms``, ``--json``, ``--bound``).

For each message it times ecp's decoder and encoder and, side by side in the
same run, a bare ``msgspec.msgpack.Decoder(T)`` / ``Encoder`` on the same
frames and the same types (with the same tensor/ext hooks, which these
messages never call). Both sides are called the same way, as a receiver built
directly on msgspec would: ``decode(frames[payload])`` against
``ecp.spec.decode_*(frames)``; ``[encode(msg)]`` against
``ecp.spec.encode_*(msg)``. Rounds alternate between the two; the table shows
median nanoseconds per call and the median of the per-round ratios. The script
exits 1 when any ratio exceeds ``--bound`` (1.15 by default).

The ``floor`` column times the bare decoder preceded by a single
``len(frame) <= limit`` test against the bare decoder alone: what any decoder
that refuses an oversized frame before msgspec allocates (``ECP-FRAME-9``) pays
at least. It is shown, not bounded.

Messages: golden ADDs (Python frontend, vllm-rs), a 512-token ADD, output
steps of 1, 64 and 256 streams as a vLLM 0.33 engine sends them (every field,
scheduler stats), a bare streaming token, a utility call and reply, an ABORT,
and the handshake frames (HELLO, READY, INIT, ready payload).

A second table has one row per release profile (:mod:`ecp.spec.profile`): an
output step of 64 streams and an ADD in that release's own wire form (the
layout's sparse sample; the ADD with a 512-token prompt), decoded through the profile's codec, against a bare
``msgspec`` decoder of the profile's generated classes (bounded, as above) and
against :mod:`ecp.spec.codec` (vLLM 0.33's typed API, the 0.33 module's classes) on the same bytes
where it decodes them (shown, not bounded: for 0.33 this is the profile's generic codec against the
tuned one on the same classes).

A third table, when a vLLM 0.33 peer is installed (``--vllm-peer``, default ``$VLLM_PEER`` or
``~/.cache/vllm-peer-0.33``; ``none`` leaves it out), times ecp's decoder against vLLM's own
``MsgpackDecoder`` (``vllm.v1.serial_utils``) on the ADD and outputs frames above: both run in one
process of the peer's venv, which imports this tree's ``spec/`` as ``ecp.spec``, in alternating
rounds. The outputs rows are bounded by ``--vllm-bound`` (1.25 by default); the ADD rows are shown
(vLLM's decoder also runs ``SamplingParams.__post_init__``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

from ecp import spec
from ecp.spec import codec, golden
from ecp.spec.control import UtilityRequest
from ecp.spec.handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from ecp.spec.outputs import EngineCoreOutputs
from ecp.spec.request import EngineCoreRequest

BOUND = 1.15
VLLM_BOUND = 1.25
#: the tree whose spec/ the vLLM peer's process imports as ecp.spec
TREE = Path(__file__).resolve().parents[1]


def _bare(typ: Any) -> Callable[[Any], Any]:
    return msgspec.msgpack.Decoder(typ, dec_hook=codec._dec_hook, ext_hook=codec._ext_hook).decode


def _vector(vectors: list[golden.Vector], pred: Callable[[golden.Vector], bool]) -> golden.Vector:
    return next(v for v in vectors if pred(v))


def _output_step(template: list[Any], streams: int) -> bytes:
    """An output step of ``streams`` decoding requests, shaped like ``template`` (a golden
    python-engine step: all 19 fields per output, scheduler stats, weight version)."""
    value = copy.deepcopy(template)
    one = value[1][0]
    outputs = []
    for i in range(streams):
        out = list(one)
        out[0] = f"cmpl-{i:032x}-0"
        out[1] = [1000 + i]
        out[7] = None   # events: only on the first step
        out[11] = None  # prefill_stats: only on the first step
        outputs.append(out)
    value[1] = outputs
    return msgspec.msgpack.encode(value)


def _add_512() -> EngineCoreRequest:
    tokens = [(i * 7919) % 151_000 for i in range(512)]
    params = spec.SamplingParams(temperature=0.7, top_p=0.95, max_tokens=256, stop_token_ids=[151643],
                                 seed=1234)
    return EngineCoreRequest(f"cmpl-{0:032x}-0", tokens, None, params, None, 1_763_900_000.25, None, None,
                             None, client_index=0, priority=0)


def cases() -> list[dict[str, Any]]:
    """name, frames, ecp decode, bare decode, payload index, ecp encode, bare encode."""
    vs = golden.load_vectors()
    enc = msgspec.msgpack.Encoder().encode
    out = []

    def add(name: str, frames: list[bytes], ecp_dec: Callable, typ: Any, payload: int,
            ecp_enc: Callable | None) -> None:
        msg = ecp_dec(frames if payload >= 0 else frames[0])  # what ecp decodes is what both encode
        out.append({"name": name, "frames": frames, "bytes": sum(len(f) for f in frames),
                    "ecp_decode": ecp_dec, "bare_decode": _bare(typ), "payload": payload,
                    "msg": msg, "body": msg, "ecp_encode": ecp_enc, "bare_encode": enc})

    add("ADD python-frontend (golden 3b)", _vector(vs, lambda v: v.name.startswith("3b.")).frames,
        spec.decode_input, EngineCoreRequest, 1, spec.encode_input)
    add("ADD vllm-rs (float32, fixmap)",
        _vector(vs, lambda v: v.producer == "vllm-rs" and v.kind == "add").frames,
        spec.decode_input, EngineCoreRequest, 1, spec.encode_input)
    add("ADD 512-token prompt", spec.encode_add(_add_512()), spec.decode_input, EngineCoreRequest, 1,
        spec.encode_input)
    step = _vector(vs, lambda v: v.producer == "python-engine" and v.kind == "outputs"
                   and len(v.frames[0]) > 600 and v.value[1])
    add("outputs step + stats, 1 stream", step.frames, spec.decode_outputs, EngineCoreOutputs, 0,
        spec.encode_outputs)
    for n in (64, 256):
        add(f"outputs step + stats, {n} streams", [_output_step(step.value, n)], spec.decode_outputs,
            EngineCoreOutputs, 0, spec.encode_outputs)
    add("outputs streaming token (43 B)",
        _vector(vs, lambda v: v.name.startswith("EngineCoreOutputs(engine_index=1")).frames,
        spec.decode_outputs, EngineCoreOutputs, 0, spec.encode_outputs)
    add("utility reply (31 B)", _vector(vs, lambda v: "is_sleeping -> False" in v.name).frames,
        spec.decode_outputs, EngineCoreOutputs, 0, spec.encode_outputs)

    utility = _vector(vs, lambda v: v.kind == "utility" and v.producer == "python-frontend")
    add("UTILITY call (input)", utility.frames[-2:], spec.decode_input, UtilityRequest, 1, spec.encode_input)
    abort = _vector(vs, lambda v: v.kind == "abort" and v.producer == "python-frontend")
    add("ABORT", abort.frames[-2:], spec.decode_input, list[str], 1, spec.encode_input)
    for kind, decode, typ in (("hello", spec.decode_handshake, Hello | Ready),
                              ("ready", spec.decode_handshake, Hello | Ready),
                              ("init", spec.decode_init, EngineHandshakeMetadata),
                              ("ready_response", spec.decode_ready_response, EngineCoreReadyResponse)):
        v = _vector(vs, lambda v: v.kind == kind and v.producer.startswith("python"))
        add(f"handshake {kind}", v.frames[-1:], decode, typ, -1, spec.encode_handshake)
    return out


def profile_cases() -> list[dict[str, Any]]:
    """Per shipped release: (release, message, frames, profile decode, bare decode, ecp.spec's decode)."""
    from ecp.spec.layout import wire
    from ecp.spec.profile import shipped_profile, shipped_releases

    out = []
    for release in shipped_releases():
        profile = shipped_profile(release)
        step = wire.sample(profile.layout, "EngineCoreOutputs", "sparse")
        step[1] = [[f"cmpl-{i:032x}-0", [1000 + i], *one[2:]] for i, one in enumerate(step[1] * 64)]
        add = wire.sample(profile.layout, "EngineCoreRequest", "sparse")
        add[1] = _add_512().prompt_token_ids  # the prompt of the main table's 512-token ADD
        add[2] = None  # no multimodal item: its data is untyped in most layouts
        for name, frames, ours, cls, hand in (
                ("outputs, 64 streams", [msgspec.msgpack.encode(step)], profile.codec.decode_outputs,
                 profile.frame_message("outputs"), spec.decode_outputs),
                ("ADD, 512 tokens", [b"\x00", msgspec.msgpack.encode(add)], profile.codec.decode_input,
                 profile.frame_message("ADD"), spec.decode_input)):
            ours(frames)  # (raises if the profile cannot decode its own sample)
            try:
                hand(frames)
            except spec.ProtocolError:
                hand = None
            bare = _bare(cls)
            if len(frames) == 2:
                def bare_decode(fr: list[bytes], d: Callable = bare) -> Any:
                    return d(fr[1])
            else:
                def bare_decode(fr: list[bytes], d: Callable = bare) -> Any:
                    return d(fr[0])
            out.append({"release": release, "message": name, "frames": frames, "bytes": sum(map(len, frames)),
                        "profile": ours, "bare": bare_decode, "api": hand})
    return out


def measure_profiles(rounds: int, target_s: float) -> list[dict[str, Any]]:
    rows = []
    for c in profile_cases():
        row = {"release": c["release"], "message": c["message"], "bytes": c["bytes"],
               "decode": _pair(c["profile"], c["frames"], c["bare"], c["frames"], rounds, target_s)}
        if c["api"] is not None:
            row["vs_api"] = _pair(c["profile"], c["frames"], c["api"], c["frames"], rounds, target_s)
        rows.append(row)
    return rows


def _time(fn: Callable[[Any], Any], arg: Any, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(arg)
    return (time.perf_counter_ns() - start) / calls


def _pair(ecp: Callable[[Any], Any], ecp_arg: Any, bare: Callable[[Any], Any], bare_arg: Any,
          rounds: int, target_s: float) -> dict[str, float]:
    calls = 1
    while _time(bare, bare_arg, calls) * calls < target_s * 1e9 and calls < 1 << 20:
        calls *= 2
    ecp_ns, bare_ns, ratios = [], [], []
    for r in range(rounds):
        if r % 2:  # alternate who goes first, so drift hits both alike
            b = _time(bare, bare_arg, calls)
            e = _time(ecp, ecp_arg, calls)
        else:
            e = _time(ecp, ecp_arg, calls)
            b = _time(bare, bare_arg, calls)
        ecp_ns.append(e)
        bare_ns.append(b)
        ratios.append(e / b)
    return {"ecp_ns": statistics.median(ecp_ns), "bare_ns": statistics.median(bare_ns),
            "ratio": statistics.median(ratios)}


def measure(rounds: int, target_s: float) -> list[dict[str, Any]]:
    limit = spec.DEFAULT_LIMITS.max_frame_bytes
    rows = []
    for c in cases():
        frames, p = c["frames"], c["payload"]
        bare_dec = c["bare_decode"]
        arg: Any = frames
        # the bare receiver, and its floor: the same preceded by the one length test that
        # ECP-FRAME-9's frame-size limit needs before msgspec allocates, and nothing else
        if p == 1:  # an input message: the bare receiver also dispatches on the type frame, as vLLM's does
            decoders = {frames[0]: bare_dec}

            def bare_decode(fr: list[bytes], decoders: dict = decoders) -> Any:
                return fr[0], decoders[fr[0]](fr[1])

            def floor_decode(fr: list[bytes], decoders: dict = decoders, limit: int = limit) -> Any:
                if len(fr[1]) <= limit:
                    return fr[0], decoders[fr[0]](fr[1])
                return None
        elif p == 0:
            def bare_decode(fr: list[bytes], d: Callable = bare_dec) -> Any:
                return d(fr[0])

            def floor_decode(fr: list[bytes], d: Callable = bare_dec, limit: int = limit) -> Any:
                if len(fr[0]) <= limit:
                    return d(fr[0])
                return None
        else:  # a handshake decoder takes the one frame itself
            arg = frames[0]

            def bare_decode(frame: bytes, d: Callable = bare_dec) -> Any:
                return d(frame)

            def floor_decode(frame: bytes, d: Callable = bare_dec, limit: int = limit) -> Any:
                if len(frame) <= limit:
                    return d(frame)
                return None

        dec = _pair(c["ecp_decode"], arg, bare_decode, arg, rounds, target_s)
        dec["floor_ratio"] = _pair(floor_decode, arg, bare_decode, arg, rounds, target_s)["ratio"]
        row = {"message": c["name"], "bytes": c["bytes"], "decode": dec}
        if c["ecp_encode"] is spec.encode_handshake:
            enc = _pair(spec.encode_handshake, c["msg"], c["bare_encode"], c["body"], rounds, target_s)
        else:
            bare_enc = c["bare_encode"]

            def bare_encode(body: Any, e: Callable = bare_enc, first: list[bytes] = frames[:p]) -> list[bytes]:
                return [*first, e(body)]

            enc = _pair(c["ecp_encode"], c["msg"], bare_encode, c["body"], rounds, target_s)
        row["encode"] = enc
        rows.append(row)
    return rows


_VLLM_CHILD = r"""
import json, statistics, sys, time, types
import msgspec
package = types.ModuleType("ecp")
package.__path__ = [sys.argv[1]]  # ecp.spec is this tree's spec/
sys.modules["ecp"] = package
from ecp import spec
from vllm.v1.engine import EngineCoreOutputs, EngineCoreRequest
from vllm.v1.serial_utils import MsgpackDecoder
rounds, target_s = int(sys.argv[2]), float(sys.argv[3])
def timed(fn, arg, calls):
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(arg)
    return (time.perf_counter_ns() - start) / calls
vllm_outputs, vllm_request = MsgpackDecoder(EngineCoreOutputs).decode, MsgpackDecoder(EngineCoreRequest).decode
rows = []
for name, frames, payload in msgspec.msgpack.decode(sys.stdin.buffer.read()):
    if payload == 0:
        ours, theirs = spec.decode_outputs, vllm_outputs
    else:  # vLLM's input thread: the type frame picks the decoder of the rest
        ours = spec.decode_input
        def theirs(fr, d=vllm_request):
            return fr[0], d(fr[1:])
    calls = 1
    while timed(theirs, frames, calls) * calls < target_s * 1e9 and calls < 1 << 20:
        calls *= 2
    e_ns, v_ns, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            v = timed(theirs, frames, calls); e = timed(ours, frames, calls)
        else:
            e = timed(ours, frames, calls); v = timed(theirs, frames, calls)
        e_ns.append(e); v_ns.append(v); ratios.append(e / v)
    rows.append({"message": name, "output": payload == 0, "ecp_ns": statistics.median(e_ns),
                 "vllm_ns": statistics.median(v_ns), "ratio": statistics.median(ratios)})
print(json.dumps(rows))
"""


def vllm_peer(option: str | None) -> Path | None:
    """The vLLM 0.33 peer to compare with: ``--vllm-peer``, ``$VLLM_PEER`` or ``~/.cache/vllm-peer-0.33``
    (``none``: no comparison); ``None`` when it has no venv."""
    if option == "none":
        return None
    peer = Path(option or os.environ.get("VLLM_PEER") or Path.home() / ".cache" / "vllm-peer-0.33")
    return peer if (peer / "venv" / "bin" / "python").is_file() else None


def measure_vllm(peer: Path, rounds: int, target_s: float) -> list[dict[str, Any]]:
    """ecp's decoder against vLLM's ``MsgpackDecoder`` on the ADD and outputs frames, in the peer's venv."""
    chosen = [[c["name"], c["frames"], c["payload"]] for c in cases()
              if c["payload"] == 0 or c["name"].startswith("ADD")]
    proc = subprocess.run([str(peer / "venv" / "bin" / "python"), "-c", _VLLM_CHILD, str(TREE), str(rounds),
                           str(target_s)], input=msgspec.msgpack.encode(chosen), capture_output=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the vLLM peer's process failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(proc.stdout)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}; Python {platform.python_version()}; msgspec {msgspec.__version__}; "
            f"{platform.system()} {platform.release()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # many short rounds: on a shared machine most batches then run without being preempted
    ap.add_argument("--rounds", type=int, default=201, help="alternating rounds per measurement (median)")
    ap.add_argument("--round-ms", type=float, default=0.3, help="length of one timed batch, ms")
    ap.add_argument("--bound", type=float, default=BOUND, help="largest ecp/msgspec ratio accepted")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--profiles", choices=("yes", "no", "only"), default="yes",
                    help="the per-release profile table: with the main table, without it, or alone")
    ap.add_argument("--vllm-peer", metavar="DIR|none",
                    help="a vLLM 0.33 peer (its venv/) to time vLLM's MsgpackDecoder against (default: $VLLM_PEER "
                         "or ~/.cache/vllm-peer-0.33 where present; none: leave the table out)")
    ap.add_argument("--vllm-bound", type=float, default=VLLM_BOUND,
                    help="largest ecp/vLLM decode ratio accepted for outputs")
    args = ap.parse_args(argv)
    rows = measure(args.rounds, args.round_ms / 1000) if args.profiles != "only" else []
    profile_rows = measure_profiles(args.rounds, args.round_ms / 1000) if args.profiles != "no" else []
    peer = vllm_peer(args.vllm_peer) if args.profiles != "only" else None
    vllm_rows = measure_vllm(peer, args.rounds, args.round_ms / 1000) if peer is not None else []
    worst = max([max(r["decode"]["ratio"], r["encode"]["ratio"]) for r in rows]
                + [r["decode"]["ratio"] for r in profile_rows])
    worst_vllm = max((r["ratio"] for r in vllm_rows if r["output"]), default=0.0)
    if args.json:
        print(json.dumps({"machine": machine(), "bound": args.bound, "rows": rows, "profiles": profile_rows,
                          "vllm_bound": args.vllm_bound, "vllm": vllm_rows}, indent=1))
    else:
        print(f"# {machine()}")
        print(f"# median ns per call over {args.rounds} alternating rounds; ratio = median of per-round ratios")
        print("# floor: msgspec preceded by one len(frame) <= limit test and nothing else (not bounded)")
        print(f"{'message':<36} {'bytes':>6} | {'ecp dec':>9} {'msgspec':>9} {'ratio':>6} {'floor':>6} | "
              f"{'ecp enc':>9} {'msgspec':>9} {'ratio':>6}")
        for r in rows:
            d, e = r["decode"], r["encode"]
            print(f"{r['message']:<36} {r['bytes']:>6} | {d['ecp_ns']:>9.0f} {d['bare_ns']:>9.0f} "
                  f"{d['ratio']:>5.2f}x {d['floor_ratio']:>5.2f}x | "
                  f"{e['ecp_ns']:>9.0f} {e['bare_ns']:>9.0f} {e['ratio']:>5.2f}x")
        if profile_rows:
            print("\n# release profiles: decode through the profile's codec against msgspec on its classes "
                  "(ratio, bounded) and against ecp.spec's codec on the same bytes (shown)")
            print(f"{'release':<8} {'message':<20} {'bytes':>6} | {'profile':>9} {'msgspec':>9} {'ratio':>6} | "
                  f"{'ecp.spec':>9} {'ratio':>6}")
            for r in profile_rows:
                d, h = r["decode"], r.get("vs_api")
                hand = f"{h['bare_ns']:>9.0f} {h['ratio']:>5.2f}x" if h else f"{'-':>9} {'-':>6}"
                print(f"{r['release']:<8} {r['message']:<20} {r['bytes']:>6} | {d['ecp_ns']:>9.0f} "
                      f"{d['bare_ns']:>9.0f} {d['ratio']:>5.2f}x | {hand}")
        if vllm_rows:
            print(f"\n# against vLLM 0.33's MsgpackDecoder ({peer}, one process of its venv): outputs bounded, "
                  "ADDs shown")
            print(f"{'message':<36} | {'ecp dec':>9} {'vLLM dec':>9} {'ratio':>6}")
            for r in vllm_rows:
                print(f"{r['message']:<36} | {r['ecp_ns']:>9.0f} {r['vllm_ns']:>9.0f} {r['ratio']:>5.2f}x")
        elif args.profiles != "only":
            print("\n# no vLLM 0.33 peer (--vllm-peer): the comparison with vLLM's MsgpackDecoder is left out")
        print(f"worst ratio {worst:.2f}x (bound {args.bound:.2f}x)"
              + (f"; against vLLM's decoder {worst_vllm:.2f}x (bound {args.vllm_bound:.2f}x)" if vllm_rows else ""))
    failed = worst > args.bound or worst_vllm > args.vllm_bound
    if worst > args.bound:
        print(f"FAIL: a ratio exceeds {args.bound:.2f}x", file=sys.stderr)
    if worst_vllm > args.vllm_bound:
        print(f"FAIL: an outputs decode exceeds {args.vllm_bound:.2f}x vLLM's", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
