"""``ecp serve`` side by side with vLLM 0.33's frontends, each in front of the same ``ecp engine``.

For every engine step time and every installed frontend, this starts the
frontend waiting for one remote engine (``--data-parallel-size-local 0``,
tcp handshake), starts ``ecp engine`` (synthetic executor, headless) against
it, drives it with one load generator and stops both. Frontends:

* ``ecp`` -- ``ecp serve`` (always);
* ``vllm`` -- vLLM 0.33's Python API server, and ``vllm-rs`` -- the same with
  ``VLLM_USE_RUST_FRONTEND=1``; both only when a vLLM 0.33 peer is installed
  (``--peer DIR``, default ``$VLLM_PEER`` or ``~/.cache/vllm-peer-0.33``;
  ``run_serve.sh`` and ``venv/`` inside). Without it they are skipped, and
  the script says so.

``--ecp-api-servers 1 2`` runs ``ecp serve`` once per API server count
(``--api-server-count``).

Generator: ``vllm-rs bench serve`` from the peer when present (random prompts
sent as token ids, ``--ignore-eos``), else ``ecp bench serve``. The table has
output tok/s, TTFT p50 / p99 and ITL p50 / p99 per frontend, and the CPU the
frontend's processes used during the load (cores = CPU seconds / duration;
µs of frontend CPU per output token: what one token costs the frontend,
whatever the number of cores), then ``ecp serve``'s ratio to each other
frontend measured in the same round with the same generator (tok/s: higher is
better; latencies: ``ecp / other``, lower is better), and whether the serving
targets against vllm-rs hold in each round (``TARGETS``). ``--rounds N`` runs
every frontend N times, one after the other per round, so that the two sides
of each ratio see the same load on a shared machine. ``--interleave`` starts every frontend once
instead (each with its own engine) and loads them in turn, in a seeded random order per round,
so that many rounds take a minute; with several rounds the script adds the medians over them
(each side's figures, the per-round ratios, and in how many rounds the targets held).

    python -m benchmarks.serve_compare                      # step 0 and 10 ms, c=256, 1,024 requests
    python -m benchmarks.serve_compare --frontends ecp --step-time-ms 0 -c 4 -n 16 --output-len 8
    python -m benchmarks.serve_compare --ecp-api-servers 1 2            # ecp serve with 1, then 2 API servers
    python -m benchmarks.serve_compare --frontends vllm-rs ecp --step-time-ms 0 --generator both --rounds 3
    python -m benchmarks.serve_compare --frontends vllm-rs ecp --step-time-ms 0 --generator both --rounds 20 --interleave

Exit status: 0 when every run completed with no failed request, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FRONTENDS = ("vllm", "vllm-rs", "ecp")
LABELS = {"vllm": "vLLM 0.33 Python", "vllm-rs": "vllm-rs (Rust)", "ecp": "`ecp serve`"}

from benchmarks.procstat import tree_cpu_seconds  # noqa: E402

from ecp.conformance.frontend.launcher import free_port  # noqa: E402


def label(kind: str) -> str:
    """``ecp:2`` is ``ecp serve --api-server-count 2``."""
    base, _, count = kind.partition(":")
    return LABELS[base] + (f" ×{count} API servers" if count and count != "1" else "")


def default_peer() -> Path:
    return Path(os.environ.get("VLLM_PEER") or Path.home() / ".cache" / "vllm-peer-0.33")


def vllm_rs_binary(peer: Path) -> Path | None:
    """The ``vllm-rs`` executable shipped inside the peer's vllm wheel, if any."""
    for site in sorted((peer / "venv" / "lib").glob("python3*/site-packages/vllm/vllm-rs")):
        if os.access(site, os.X_OK):
            return site
    return None


def peer_ready(peer: Path) -> bool:
    return (peer / "run_serve.sh").is_file() and (peer / "venv" / "bin" / "vllm").exists()


def frontend_command(kind: str, peer: Path, http_port: int, rpc_port: int) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    remote = ["--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
              "--data-parallel-rpc-port", str(rpc_port), "--data-parallel-size", "1"]
    base, _, count = kind.partition(":")
    if base == "ecp":
        return [sys.executable, "-m", "ecp.spec.cli", "serve", "--port", str(http_port), "--handshake-timeout", "120",
                "--api-server-count", count or "1", *remote], env
    env["PORT"] = str(http_port)
    env["TMO"] = "1800"
    if kind == "vllm-rs":
        env["VLLM_USE_RUST_FRONTEND"] = "1"
    return ["bash", str(peer / "run_serve.sh"), *remote], env


def engine_command(rpc_port: int, step_ms: float) -> list[str]:
    return [sys.executable, "-m", "ecp.spec.cli", "engine", "--handshake-address", f"tcp://127.0.0.1:{rpc_port}",
            "--step-time-ms", str(step_ms), "--log-level", "WARNING"]


def wait_http(url: str, procs: list[subprocess.Popen], timeout: float) -> str:
    """Poll ``/v1/models`` until it answers; return the served model id."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[:3]} exited with {p.returncode} before serving")
        try:
            r = httpx.get(url + "/v1/models", timeout=2.0)
            if r.status_code == 200:
                return r.json()["data"][0]["id"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError):
            pass
        time.sleep(0.5)  # polling a child process's readiness, not synchronising a test
    raise RuntimeError(f"{url} not serving after {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_vllm_rs_bench(binary: Path, peer: Path, http_port: int, model: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(binary), "bench", "serve", "--backend", "vllm", "--host", "127.0.0.1", "--port", str(http_port),
               "--model", model, "--tokenizer", str(peer / "models" / "tiny-llama"), "--dataset-name", "random",
               "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
               "--prompt-token-ids", "--ignore-eos", "--num-prompts", str(args.num_prompts),
               "--max-concurrency", str(args.concurrency), "--request-rate", "inf", "--seed", str(args.seed),
               "--percentile-metrics", "ttft,itl,tpot", "--metric-percentiles", "50,90,99", "--disable-tqdm",
               "--save-result", "--result-dir", tmp, "--result-filename", "r.json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        path = Path(tmp) / "r.json"
        if not path.exists():
            raise RuntimeError(f"vllm-rs bench serve failed ({proc.returncode}): {proc.stderr[-800:]}")
        raw = json.loads(path.read_text())
    return {"generator": "vllm-rs bench serve", "completed": raw.get("completed"), "duration_s": raw.get("duration"),
            "output_tokens": raw.get("total_output_tokens"),
            "failed": raw.get("failed", args.num_prompts - (raw.get("completed") or 0)),
            "output_tok_s": raw.get("output_throughput"),
            "ttft_p50": raw.get("p50_ttft_ms", raw.get("median_ttft_ms")), "ttft_p99": raw.get("p99_ttft_ms"),
            "itl_p50": raw.get("p50_itl_ms", raw.get("median_itl_ms")), "itl_p99": raw.get("p99_itl_ms")}


def run_ecp_bench(http_port: int, model: str, args: argparse.Namespace) -> dict:
    from ecp.reference.frontend.bench import run_bench

    r = asyncio.run(run_bench(f"http://127.0.0.1:{http_port}", model=model, concurrency=args.concurrency,
                              num_requests=args.num_prompts, prompt_len=args.input_len,
                              max_tokens=args.output_len, timeout=args.timeout, progress=False))
    return {"generator": "ecp bench serve", "completed": r["completed"], "failed": r["failed"],
            "duration_s": r["duration_s"], "output_tokens": r["output_tokens"],
            "output_tok_s": r["output_tokens_per_s"], "ttft_p50": r["ttft_ms"]["p50"],
            "ttft_p99": r["ttft_ms"]["p99"], "itl_p50": r["itl_ms"]["p50"], "itl_p99": r["itl_ms"]["p99"]}


class Frontend:
    """One frontend under test with its own ``ecp engine``, up until :meth:`stop`."""

    def __init__(self, kind: str, step_ms: float, args: argparse.Namespace) -> None:
        self.kind, self.step_ms = kind, step_ms
        self.http_port, rpc_port = free_port(), free_port()
        cmd, env = frontend_command(kind, args.peer, self.http_port, rpc_port)
        self.logs = tempfile.TemporaryFile()
        self.fe = subprocess.Popen(cmd, env=env, stdout=self.logs, stderr=subprocess.STDOUT, start_new_session=True)
        # The frontend binds the handshake ROUTER; the engine retries its connect until it is there.
        self.eng = subprocess.Popen(engine_command(rpc_port, step_ms), stdout=subprocess.DEVNULL, stderr=self.logs)
        self.model: str | None = None

    def wait_serving(self, args: argparse.Namespace) -> None:
        self.model = wait_http(f"http://127.0.0.1:{self.http_port}", [self.fe, self.eng], args.start_timeout)

    def load(self, gen: str, args: argparse.Namespace, rs: Path | None) -> dict:
        """One load by generator ``gen``; the row (``error`` and the log's tail when it failed)."""
        try:
            if self.model is None:
                self.wait_serving(args)
            cpu0 = tree_cpu_seconds(self.fe.pid)
            row = (run_vllm_rs_bench(rs, args.peer, self.http_port, self.model, args) if gen == "vllm-rs"
                   else run_ecp_bench(self.http_port, self.model, args))
            row["frontend_cpu_s"] = tree_cpu_seconds(self.fe.pid) - cpu0
        except Exception as exc:
            self.logs.seek(0, os.SEEK_END)
            size = self.logs.tell()
            self.logs.seek(max(0, size - 1500))
            row = {"error": f"{type(exc).__name__}: {exc}", "log_tail": self.logs.read().decode(errors="replace"),
                   "generator": f"{gen} bench serve"}
        row.update(frontend=self.kind, step_ms=self.step_ms)
        return row

    def stop(self) -> None:
        for p in (self.fe, self.eng):
            stop(p)
        self.logs.close()


def run_one(kind: str, step_ms: float, args: argparse.Namespace, rs: Path | None, gens: list[str]) -> list[dict]:
    fe = Frontend(kind, step_ms, args)
    try:
        rows = []
        for g in gens * args.repeat:
            rows.append(fe.load(g, args, rs))
            if "error" in rows[-1]:
                break
        return rows
    finally:
        fe.stop()


def run_interleaved(kinds: list[str], step_ms: float, args: argparse.Namespace, rs: Path | None,
                    gens: list[str]) -> list[dict]:
    """Every frontend up at once (each with its engine), then per round each loaded in turn, in a
    seeded random order: a round's loads are seconds apart, and no frontend always goes first."""
    import random

    fronts: list[Frontend] = []
    rows = []
    try:
        for kind in kinds:
            fronts.append(Frontend(kind, step_ms, args))
        for fe in fronts:
            try:
                fe.wait_serving(args)
            except Exception as exc:
                return [{"error": f"{type(exc).__name__}: {exc}", "frontend": fe.kind, "step_ms": step_ms}]
        order = random.Random(args.seed)
        for rnd in range(args.rounds):
            for fe in order.sample(fronts, len(fronts)):
                for g in gens:
                    row = fe.load(g, args, rs)
                    row["round"] = rnd
                    rows.append(row)
            print(f"  round {rnd + 1} step {step_ms:g} ms: " + ", ".join(
                f"{r['frontend']} ({r.get('generator')}) {r.get('error') or _f(r.get('output_tok_s'), 0) + ' tok/s'}"
                for r in rows if r["round"] == rnd), file=sys.stderr)
    finally:
        for fe in fronts:
            fe.stop()
    return rows


def _f(v: Any, nd: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{nd}f}"


def ratio(a: Any, b: Any) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}×"


def cpu_cell(r: dict) -> str:
    """Frontend cores used and µs of frontend CPU per output token."""
    cpu, dur, toks = r.get("frontend_cpu_s"), r.get("duration_s"), r.get("output_tokens")
    if cpu is None or not dur or not toks:
        return "n/a"
    return f"{cpu / dur:.2f} / {cpu / toks * 1e6:.1f} µs"


def table(rows: list[dict]) -> str:
    several = len({r.get("generator") for r in rows}) > 1
    head = "| engine step | frontend |" + (" generator |" if several else "")
    out = [head + " output tok/s | TTFT p50 / p99 | ITL p50 / p99 | frontend CPU: cores / per token |",
           "|---|---|" + ("---|" if several else "") + "---:|---|---|---|"]
    for r in rows:
        lead = f"| {r['step_ms']:g} ms | {label(r['frontend'])} |" + (f" {r.get('generator')} |" if several else "")
        if "error" in r:
            out.append(f"{lead} failed: {r['error'][:80]} | | | |")
            continue
        out.append(f"{lead} {_f(r['output_tok_s'], 0)} | {_f(r['ttft_p50'])} / {_f(r.get('ttft_p99'))} ms | "
                   f"{_f(r['itl_p50'], 2)} / {_f(r['itl_p99'], 1)} ms | {cpu_cell(r)} |")
    ratios, verdicts = [], []
    generators = list(dict.fromkeys(r.get("generator") for r in rows))
    rounds = sorted({r.get("round", 0) for r in rows})
    for step in sorted({r["step_ms"] for r in rows}):
        for rnd in rounds:
            for gen in generators:
                # ratios between frontends within one round and one generator: the runs side by side
                by = {r["frontend"]: r for r in rows if r["step_ms"] == step and "error" not in r
                      and r.get("generator") == gen and r.get("round", 0) == rnd}
                where = ", ".join(([f"round {rnd + 1}"] if len(rounds) > 1 else [])
                                  + ([str(gen)] if len(generators) > 1 else []))
                for kind in sorted(k for k in by if k.startswith("ecp")):
                    ours = by[kind]
                    for other in ("vllm-rs", "vllm"):
                        o = by.get(other)
                        if o is None:
                            continue
                        name = "ecp" if kind == "ecp" else f"ecp ×{kind.partition(':')[2]}"
                        name += f" / {LABELS[other]}" + (f" ({where})" if where else "")
                        ratios.append(f"| {step:g} ms | {name} | "
                                      f"{ratio(ours['output_tok_s'], o['output_tok_s'])} | "
                                      f"{ratio(ours['ttft_p50'], o['ttft_p50'])} | "
                                      f"{ratio(ours['itl_p50'], o['itl_p50'])} / "
                                      f"{ratio(ours['itl_p99'], o['itl_p99'])} |")
                        if other == "vllm-rs":
                            verdicts.append(f"| {step:g} ms | {name} | {target_verdict(ours, o)} |")
    if ratios:
        out += ["", "| engine step | ratio | output tok/s | TTFT p50 | ITL p50 / p99 |", "|---|---|---:|---:|---|",
                *ratios]
    if verdicts:
        out += ["", "Targets against vllm-rs (" + ", ".join(t[2] for t in TARGETS) + "):", "",
                "| engine step | runs | verdict |", "|---|---|---|", *verdicts]
    return "\n".join(out)


#: The serving targets against vllm-rs: (metric, holds(ecp / vllm-rs), text).
TARGETS = (("output_tok_s", lambda q: q >= 1.0, "tok/s ≥ 1.0×"),
           ("ttft_p50", lambda q: q <= 1.25, "TTFT p50 ≤ 1.25×"),
           ("itl_p99", lambda q: q <= 1.0, "ITL p99 ≤ 1.0×"))


def medians(rows: list[dict]) -> str:
    """Per step and generator, each ecp frontend against vllm-rs over the rounds: the median of
    each side's figures, the median of the per-round ratios, and in how many rounds all three
    targets held (with a machine's round-to-round spread, a median says what a round does not)."""
    import statistics

    out = ["| engine step | generator | frontend | rounds | output tok/s | TTFT p50 | ITL p99 | "
           "tok/s × | TTFT p50 × | ITL p99 × | rounds meeting the targets |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ok = [r for r in rows if "error" not in r]
    for step in sorted({r["step_ms"] for r in ok}):
        for gen in dict.fromkeys(r.get("generator") for r in ok):
            here = [r for r in ok if r["step_ms"] == step and r.get("generator") == gen]
            rs = {r.get("round", 0): r for r in here if r["frontend"] == "vllm-rs"}
            for kind in dict.fromkeys(r["frontend"] for r in here):
                mine = [r for r in here if r["frontend"] == kind]
                med = {k: statistics.median(r[k] for r in mine) if all(r.get(k) is not None for r in mine) else None
                       for k, _, _ in TARGETS}
                line = (f"| {step:g} ms | {gen} | {label(kind)} | {len(mine)} | {_f(med['output_tok_s'], 0)} | "
                        f"{_f(med['ttft_p50'])} | {_f(med['itl_p99'])} |")
                pairs = [(r, rs[r.get("round", 0)]) for r in mine if kind != "vllm-rs" and r.get("round", 0) in rs]
                if pairs and kind.startswith("ecp"):
                    for key, _, _ in TARGETS:
                        qs = [a[key] / b[key] for a, b in pairs if a.get(key) is not None and b.get(key)]
                        line += f" {statistics.median(qs):.2f}× |" if qs else " n/a |"
                    met = sum(target_verdict(a, b) == "met" for a, b in pairs)
                    line += f" {met} of {len(pairs)} |"
                else:
                    line += " | | | |"
                out.append(line)
    return "\n".join(out)


def target_verdict(ours: dict, rs: dict) -> str:
    """``met`` or the targets that failed, for one side-by-side pair of runs."""
    failed = []
    for key, holds, text in TARGETS:
        a, b = ours.get(key), rs.get(key)
        if a is None or not b or not holds(a / b):
            failed.append(f"{text}: {ratio(a, b)}")
    return "met" if not failed else "not met (" + "; ".join(failed) + ")"


AGREEMENT_METRICS = (("output_tok_s", "output tok/s"), ("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99"),
                     ("itl_p50", "ITL p50"), ("itl_p99", "ITL p99"))


def agreement(rows: list[dict]) -> str:
    """Per frontend and step: each generator's mean over its runs, and ``ecp bench serve``'s
    mean / ``vllm-rs bench serve``'s (do the generators agree on the same server?)."""
    out = ["| engine step | frontend | generator | runs | " + " | ".join(n for _, n in AGREEMENT_METRICS) + " |",
           "|---|---|---|---:|" + "---:|" * len(AGREEMENT_METRICS)]
    for step in sorted({r["step_ms"] for r in rows}):
        for kind in dict.fromkeys(r["frontend"] for r in rows if r["step_ms"] == step):
            means = {}
            for gen in ("vllm-rs bench serve", "ecp bench serve"):
                mine = [r for r in rows if r["step_ms"] == step and r["frontend"] == kind
                        and r.get("generator") == gen and "error" not in r]
                if not mine:
                    continue
                means[gen] = {k: (sum(r[k] for r in mine) / len(mine) if all(r.get(k) is not None for r in mine)
                                  else None) for k, _ in AGREEMENT_METRICS}
                out.append(f"| {step:g} ms | {label(kind)} | {gen} | {len(mine)} | "
                           + " | ".join(_f(means[gen][k], 2 if k.startswith("itl") else 1)
                                        for k, _ in AGREEMENT_METRICS) + " |")
            if len(means) == 2:
                e, v = means["ecp bench serve"], means["vllm-rs bench serve"]
                out.append(f"| {step:g} ms | {label(kind)} | ecp / vllm-rs | | "
                           + " | ".join(ratio(e[k], v[k]) for k, _ in AGREEMENT_METRICS) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frontends", nargs="+", choices=FRONTENDS, default=list(FRONTENDS))
    ap.add_argument("--step-time-ms", type=float, nargs="+", default=[0.0, 10.0])
    ap.add_argument("--ecp-api-servers", type=int, nargs="+", default=[1], metavar="N",
                    help="run ecp serve once per --api-server-count N (default: 1)")
    ap.add_argument("--concurrency", "-c", type=int, default=256)
    ap.add_argument("--num-prompts", "-n", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peer", type=Path, default=default_peer(), help="vLLM 0.33 peer directory")
    ap.add_argument("--generator", choices=("auto", "vllm-rs", "ecp", "both"), default="auto",
                    help="auto: vllm-rs bench serve when the peer ships it, else ecp bench serve; both: each "
                         "frontend is loaded by vllm-rs bench serve, then by ecp bench serve (do they agree?)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="load each frontend this many times with the generator(s), alternating (run-to-run spread)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every frontend (one after the other) this many times, each round side by side, "
                         "with its own ratios and target verdicts (the machine's load changes between rounds)")
    ap.add_argument("--interleave", action="store_true",
                    help="start every frontend once (each with its engine) and load them in turn, in a seeded random "
                         "order per round, instead of starting each afresh per round; adds the medians over the rounds")
    ap.add_argument("--start-timeout", type=float, default=180.0, help="seconds for a frontend to serve")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for one load run")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = ap.parse_args(argv)

    have_peer = peer_ready(args.peer)
    if args.repeat < 1 or args.rounds < 1:
        ap.error("--repeat and --rounds must be at least 1")
    if any(n < 1 for n in args.ecp_api_servers):
        ap.error("--ecp-api-servers values must be at least 1")
    frontends = [f for f in args.frontends if f == "ecp" or have_peer]
    skipped = [f for f in args.frontends if f not in frontends]
    if skipped:
        print(f"serve_compare: no vLLM 0.33 peer at {args.peer}: skipping {', '.join(skipped)}", file=sys.stderr)
    rs = vllm_rs_binary(args.peer) if have_peer and args.generator != "ecp" else None
    if args.generator in ("vllm-rs", "both") and rs is None:
        print(f"serve_compare: --generator {args.generator} but no vllm-rs binary in the peer", file=sys.stderr)
        return 2
    gens = ["vllm-rs", "ecp"] if args.generator == "both" else ["vllm-rs"] if rs else ["ecp"]
    print(f"serve_compare: generator {' then '.join(g + ' bench serve' for g in gens)}, c={args.concurrency}, "
          f"{args.num_prompts} requests, {args.input_len} in / {args.output_len} out tokens; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", file=sys.stderr)
    rows = []
    kinds = [k for f in frontends for k in ([f"ecp:{n}" if n != 1 else "ecp" for n in args.ecp_api_servers]
                                            if f == "ecp" else [f])]
    if args.interleave:
        if args.repeat != 1:
            ap.error("--interleave runs each frontend once per round and generator: use --rounds, not --repeat")
        for step in args.step_time_ms:
            rows += run_interleaved(kinds, step, args, rs, gens)
    for rnd in range(0 if args.interleave else args.rounds):
        for step in args.step_time_ms:
            for kind in kinds:
                for r in run_one(kind, step, args, rs, gens):
                    r["round"] = rnd
                    rows.append(r)
                    print(f"  round {rnd + 1} step {step:g} ms {kind} ({r.get('generator')}): "
                          f"{r.get('error') or _f(r.get('output_tok_s'), 0) + ' tok/s'}", file=sys.stderr)
    print(f"serve_compare: load average after {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        if len(gens) > 1:
            print("\nGenerators on the same server (means over the runs):\n")
            print(agreement(rows))
        if args.rounds > 1:
            print("\nOver the rounds (medians):\n")
            print(medians(rows))
    bad = [r for r in rows if "error" in r or r.get("failed")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
