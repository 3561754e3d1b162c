"""Try vLLM's known DP-wave issues against real vLLM 0.33 with a MoE model (not a test; needs the peer).

    python -m lab.vllm_known_issues [--peer ~/.cache/vllm-peer-0.33] [--split] [--rounds 3]

vLLM runs DP waves only for MoE models (``vllm/v1/engine/core.py:1546``: ``DPEngineCoreProc`` when
``model_config.is_moe``, else every rank is an independent ``EngineCoreProc``). This script writes
a MoE variant of the peer's tiny model (``MixtralForCausalLM``, 4 experts: the model-free executor
loads no weights, so only the config changes), starts vLLM's Python frontend with one API server
(``--data-parallel-size-local 0``: it runs the DP coordinator) and the two MoE engine cores headless
(with ``--split`` as two launches, rank 0 and rank 1, as on two nodes), and plays, in order:

* ``cold``: the first request after start-up, then 4 at once (#51983, #54762: headless ranks that
  never receive wave 0 would leave these hanging);
* ``idle-start``: ``--rounds`` times, after the engines went idle, one request: it reaches one rank,
  which starts a wave itself and has the coordinator wake the other with START_DP_WAVE excluding it
  (#39366: an excluded engine that does not run would hang the other in the all-reduce);
* ``pause-abort``: a long streamed request, ``POST /pause?mode=abort`` once it streams, ``/resume``,
  then the engine cores' CPU over 3 s while idle (#51481: ``engines_running`` stuck after an
  abort-mode pause keeps the ranks stepping dummy batches) and one more request;
* ``pause-wait`` and ``pause-keep``: the same pause and resume in the other modes.

Each step prints one line: what it did, how long it took, and the engine cores' CPU share while
idle. Exit 0 when every request finished and the idle engine cores stayed below ``--spin-share`` of
one core, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from pathlib import Path

import httpx


from lab.interop_matrix import Group, free_port, wait_healthy  # noqa: E402
from benchmarks.procstat import tree_cpu_seconds  # noqa: E402

#: per decode step of the model-free executor (as the interop matrix runs it)
STEP_DELAY = "0.002"


def moe_model(peer: Path, where: Path) -> Path:
    """The peer's tiny model with a MoE config (files linked, config.json rewritten)."""
    src = peer / "models" / "tiny-llama"
    out = where / "tiny-moe"
    out.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=4,
               num_experts_per_tok=2, rope_theta=cfg.pop("rope_parameters", {}).get("rope_theta", 10000.0))
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def engine_cpu_share(group: Group, seconds: float = 3.0) -> float:
    """CPU seconds per second of the engine-core launches over ``seconds`` (1.0 = one core busy)."""
    pids = [p.pid for name, p in group.procs if name.startswith("engines")]
    before = sum(tree_cpu_seconds(pid) for pid in pids)
    time.sleep(seconds)  # a measurement window, not synchronisation
    return (sum(tree_cpu_seconds(pid) for pid in pids) - before) / seconds


def complete(client: httpx.Client, model: str, max_tokens: int = 8) -> float:
    t0 = time.monotonic()
    r = client.post("/v1/completions", json={"model": model, "prompt": "hello", "max_tokens": max_tokens})
    if r.status_code != 200 or r.json()["usage"]["completion_tokens"] != max_tokens:
        raise RuntimeError(f"completion: HTTP {r.status_code} {r.text[:200]}")
    return time.monotonic() - t0


def pause_round(client: httpx.Client, model: str, mode: str) -> str:
    """A long stream, a pause in ``mode`` once it streams, a resume; what the stream got."""
    streamed = threading.Event()
    got: list[str] = []

    def stream() -> None:
        with client.stream("POST", "/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 240,
                                                           "stream": True}) as s:
            for line in s.iter_lines():
                if line.startswith("data:"):
                    got.append(line)
                    streamed.set()

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    if not streamed.wait(60):
        raise RuntimeError("the long stream never started")
    paused = client.post("/pause", params={"mode": mode}, timeout=60)
    resumed = client.post("/resume", timeout=60)
    t.join(90)
    if t.is_alive():
        raise RuntimeError(f"pause {mode}: the stream did not end within 90 s of /resume")
    return f"pause HTTP {paused.status_code}, resume HTTP {resumed.status_code}, stream got {len(got)} events"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", type=Path, default=Path.home() / ".cache" / "vllm-peer-0.33")
    ap.add_argument("--split", action="store_true", help="the two ranks as two headless launches (two 'nodes')")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spin-share", type=float, default=0.1,
                    help="idle engine-core CPU share (of one core) that counts as stepping while idle (0.1)")
    args = ap.parse_args()
    serve = str(args.peer / "run_serve.sh")
    ok = True
    with tempfile.TemporaryDirectory(prefix="vllm-known-") as tmp:
        model = moe_model(args.peer, Path(tmp))
        hs, http = free_port(), free_port()
        # DEBUG: the engines log each wave's end and the coordinator each wave it starts, the evidence
        # that the waves ran
        env = {"MODEL": str(model), "FAKE_STEP_DELAY": STEP_DELAY, "TMO": "900", "VLLM_LOGGING_LEVEL": "DEBUG"}
        group = Group(Path(tmp))
        dp = ["--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(hs),
              "--data-parallel-size", "2"]
        try:
            group.start("frontend", [serve, "--data-parallel-size-local", "0", "--api-server-count", "1", *dp,
                                     "--port", str(http)], env)
            if args.split:
                for rank in (0, 1):
                    group.start(f"engines{rank}", [serve, "--headless", *dp, "--data-parallel-size-local", "1",
                                                   "--data-parallel-start-rank", str(rank)], env)
            else:
                group.start("engines", [serve, "--headless", *dp, "--data-parallel-size-local", "2"], env)
            base = f"http://127.0.0.1:{http}"
            with httpx.Client(base_url=base, timeout=60.0) as client:
                problem = wait_healthy(client, group)
                if problem:
                    print("start-up:", problem)
                    return 1
                name = client.get("/v1/models").json()["data"][0]["id"]

                def step(label: str, action) -> None:
                    nonlocal ok
                    t0 = time.monotonic()
                    try:
                        what = action()
                        share = engine_cpu_share(group)
                        spin = share > args.spin_share
                        ok = ok and not spin
                        print(f"{label}: {what}; {time.monotonic() - t0 - 3:.1f}s; idle engine cores "
                              f"{share:.2f} of a core{' (stepping while idle)' if spin else ''}", flush=True)
                    except (RuntimeError, httpx.HTTPError) as e:
                        ok = False
                        print(f"{label}: FAILED: {e}", flush=True)

                step("cold", lambda: f"first request {complete(client, name):.2f}s")

                def burst() -> str:
                    errors: list[str] = []

                    def one() -> None:
                        try:
                            complete(client, name)
                        except (RuntimeError, httpx.HTTPError) as e:
                            errors.append(str(e))

                    threads = [threading.Thread(target=one) for _ in range(4)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(120)
                    if any(t.is_alive() for t in threads) or errors:
                        raise RuntimeError(f"the burst: {errors or 'a request did not finish within 120 s'}")
                    return "4 concurrent requests finished"

                step("cold-burst", burst)
                for k in range(args.rounds):
                    step(f"idle-start {k}", lambda: f"one request {complete(client, name):.2f}s")
                for mode in ("abort", "wait", "keep"):
                    step(f"pause-{mode}", lambda mode=mode: pause_round(client, name, mode))
                    step(f"after pause-{mode}", lambda: f"one request {complete(client, name):.2f}s")
        finally:
            group.stop()
            logs = {n: (Path(tmp) / f"{n}.log").read_text(errors="replace") for n, _ in group.procs}
            engines = "".join(text for n, text in logs.items() if n.startswith("engines"))
            ended = len(re.findall(r"Wave \d+ finished, pausing engine loop", engines))
            started = len(re.findall(r"Starting wave \d+ on notification", logs["frontend"]))
            print(f"waves: {ended} ended (vllm/v1/engine/core.py:2523), {started} started by an engine and "
                  "broadcast by the coordinator (vllm/v1/engine/coordinator.py:433-440)")
            for n, text in logs.items():
                if "Traceback" in text[-2000:]:
                    print(f"--- {n} log tail ---\n{text[-2000:]}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
