"""Throughput of the sans-IO codec on typical messages (``ecp.spec``).

Run: ``python benchmarks/bench_codec.py`` (prints a table; ``--json`` for machine-readable).
Messages: a Python-frontend ADD (201 bytes, golden vector 3b), a vllm-rs ADD (float32/fixmap),
a streaming EngineCoreOutputs step with scheduler stats (as a 0.33 engine sends it), a small
output without stats, and a utility reply. Figures are per message, single thread.
"""

from __future__ import annotations

import argparse
import json
import time

from ecp import spec
from ecp.spec import golden


def _vector(pred):
    return next(v for v in golden.load_vectors() if pred(v))


def _rate(fn, arg, seconds: float) -> float:
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            fn(arg)
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    cases = {
        "ADD python-frontend (201 B)": _vector(lambda v: v.name.startswith("3b.")),
        "ADD vllm-rs (float32, fixmap)": _vector(lambda v: v.producer == "vllm-rs" and v.kind == "add"),
        "outputs step + stats (python-engine)": _vector(
            lambda v: v.producer == "python-engine" and v.kind == "outputs" and len(v.frames[0]) > 600
            and v.value[1]),
        "outputs streaming token (43 B)": _vector(lambda v: v.name.startswith("EngineCoreOutputs(engine_index=1")),
        "utility reply (31 B)": _vector(lambda v: "is_sleeping -> False" in v.name),
    }
    rows = []
    for name, v in cases.items():
        if v.kind == "outputs":
            decode, encode = spec.decode_outputs, spec.encode_outputs
            msg = decode(v.frames)
            frames = v.frames
        else:
            decode, encode = spec.decode_input, spec.encode_input
            frames = v.frames
            msg = decode(frames)
        size = sum(len(f) for f in frames)
        dec = _rate(decode, frames, args.seconds)
        enc = _rate(encode, msg, args.seconds)
        rows.append({"message": name, "bytes": size, "decode_per_s": round(dec), "encode_per_s": round(enc),
                     "decode_MB_s": round(dec * size / 1e6, 1), "encode_MB_s": round(enc * size / 1e6, 1)})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'message':<40} {'bytes':>6} {'decode/s':>10} {'encode/s':>10} {'dec MB/s':>9} {'enc MB/s':>9}")
    for r in rows:
        print(f"{r['message']:<40} {r['bytes']:>6} {r['decode_per_s']:>10,} {r['encode_per_s']:>10,} "
              f"{r['decode_MB_s']:>9} {r['encode_MB_s']:>9}")


if __name__ == "__main__":
    main()
