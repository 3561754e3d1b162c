"""Real frontends of one vLLM release in front of real engine cores of another, through ``ecp monitor``.

    python -m lab.interop_matrix --cross 0.31,0.32,0.33 [--out interop-results]
                                        [--observed spec/compat/observed-0.31-0.33.json] [--pairs A:B ...]

For every ordered pair (A, B) of the releases: vLLM A's API server and Python frontend
(``--data-parallel-size-local 0``) with its handshake behind ``ecp monitor --frontend-vllm A
--engine-vllm B``, and a headless vLLM B engine core connecting to the monitor. Each peer is the
directory ``../shared/peers/vllm/SETUP.sh`` made for its release (``~/.cache/vllm-peer-X.Y``).
Then, feature by feature (:data:`FEATURES`), the HTTP traffic that reaches every message kind and
UTILITY method a frontend sends from HTTP: completions, a streamed chat and a stream dropped after
its first event (ABORT); ``/sleep`` + ``/wake_up`` + ``/is_sleeping``; ``/reset_prefix_cache``;
``/v1/load_lora_adapter`` and a completion naming the adapter; ``/start_profile`` +
``/stop_profile``; ``/pause`` + ``/resume``; ``/weight_checker`` (releases with the route). Each
feature's observed result is its HTTP statuses and the monitor's findings while it ran (read from
the monitor's event log, flushed at each violation).

The results go to a JSON file (``--observed``; :func:`ecp.spec.diff.observed.load_observed`
reads it) from which ``ecp spec compat --observed FILE`` renders the executed matrix beside the
prediction in ``docs/compatibility.md``. Never in CI: each pair starts two real vLLM processes.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from ecp.conformance.frontend.launcher import free_port
from ecp.spec.sse import DONE, SseDecoder

from lab.interop_matrix import Group, wait_healthy  # noqa: E402

#: seconds a pair gets to come up (two vLLM processes importing on a small machine)
START_BUDGET_S = 300.0
#: seconds an HTTP call may take (a utility call across the pair answers in well under a second)
CALL_TIMEOUT_S = 60.0
#: a feature's findings are read once the monitor's event log has been quiet this long
SETTLE_S = 0.5
LORA_NAME = "cross-lora"

#: feature -> (what it drives, HTTP calls: (method, path, JSON body or None, releases with the route or None: all))
FEATURES: dict[str, tuple[str, list[tuple[str, str, Any, tuple[str, ...] | None]]]] = {
    "serving": ("handshake, ADD, outputs, ABORT: completions, a streamed chat, a dropped stream", []),
    "sleep": ("sleep, wake_up, is_sleeping", [("POST", "/sleep?level=1", None, None), ("POST", "/wake_up", None, None),
                                             ("GET", "/is_sleeping", None, None)]),
    "reset prefix cache": ("reset_prefix_cache", [("POST", "/reset_prefix_cache", None, None)]),
    "LoRA": ("add_lora, then an ADD with its LoRARequest", []),
    "profile": ("profile", [("POST", "/start_profile", None, None), ("POST", "/stop_profile", None, None)]),
    "pause": ("pause_generation or pause_scheduler, resume_scheduler",
              [("POST", "/pause", None, None), ("POST", "/resume", None, None)]),
    "weight checksums": ("compute_weight_checksums",
                         [("POST", "/weight_checker", {"action": "checksum"}, ("0.32", "0.33"))]),
}
#: UTILITY method -> the feature whose traffic calls it (any other: serving, e.g. get_supported_tasks)
METHODS = {"sleep": "sleep", "wake_up": "sleep", "is_sleeping": "sleep", "reset_prefix_cache": "reset prefix cache",
           "add_lora": "LoRA", "remove_lora": "LoRA", "list_loras": "LoRA", "pin_lora": "LoRA",
           "profile": "profile", "pause_generation": "pause", "pause_scheduler": "pause",
           "resume_scheduler": "pause", "is_scheduler_paused": "pause", "compute_weight_checksums": "weight checksums"}


def utility_calls(capture: Path, engine: str) -> list[dict[str, Any]]:
    """Every UTILITY call in a monitor capture with the engine's answer: ``method``, ``args`` (their
    count) and ``failure`` (the engine's failure message, ``None`` when it answered)."""
    import msgspec

    from ecp.conformance.monitor.capture import read_capture
    from ecp.conformance.monitor.observed import Observed
    from ecp.spec.profile import shipped_profile

    codec = shipped_profile(engine).codec
    calls: dict[Any, dict[str, Any]] = {}
    for item in read_capture(capture):
        if not isinstance(item, Observed) or item.socket != "input" and item.socket != "output":
            continue
        if item.direction == "to_engine" and item.frames[:1] == (b"\x03",):
            try:
                _, call_id, method, args = msgspec.msgpack.decode(item.frames[1])
            except (msgspec.DecodeError, ValueError, TypeError):
                continue
            calls[call_id] = {"method": method, "args": len(args), "failure": None, "answered": False}
        elif item.socket == "output":
            try:
                out = codec.decode_outputs(item.frames).utility_output
            except Exception:  # noqa: BLE001 - ENGINE_CORE_DEAD, or what the monitor already reported
                continue
            if out is not None and out.call_id in calls:
                calls[out.call_id].update(failure=out.failure_message, answered=True)
    return list(calls.values())


class _Findings:
    """The monitor's violations as its event log shows them, taken feature by feature."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def take(self) -> list[dict[str, Any]]:
        end = time.monotonic() + 10 * SETTLE_S
        size = -1
        while time.monotonic() < end:  # wait for the log to be quiet: the last message's findings are in
            now = self.path.stat().st_size if self.path.exists() else 0
            if now == size:
                break
            size = now
            time.sleep(SETTLE_S)  # the monitor writes from another process: there is no event to wait on
        if not self.path.exists():
            return []
        with self.path.open() as f:
            f.seek(self.offset)
            lines = f.readlines()
            self.offset = f.tell()
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "violation":
                detail = event.get("detail") or {}
                out.append({"clause": event.get("clause"), "message": event.get("message"),
                            "code": detail.get("code"), "shows_in": detail.get("shows_in")})
        return out


def _call(client: httpx.Client, method: str, path: str, body: Any) -> dict[str, Any]:
    try:
        r = client.request(method, path, json=body, timeout=CALL_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return {"call": f"{method} {path}", "status": None, "body": f"{type(exc).__name__}: {exc}"[:300]}
    # an answer's body is kept when it says what failed (a success's body is the model's text)
    return {"call": f"{method} {path}", "status": r.status_code, "body": "" if r.is_success else r.text[:300]}


def _serving(client: httpx.Client, model: str) -> list[dict[str, Any]]:
    calls = [_call(client, "POST", "/v1/completions", {"model": model, "prompt": f"hello {k}", "max_tokens": 5})
             for k in range(2)]
    events: list[bytes] = []
    status = None
    try:
        with client.stream("POST", "/v1/chat/completions", timeout=CALL_TIMEOUT_S, json={
                "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "stream": True}) as s:
            status = s.status_code
            decoder = SseDecoder()
            events = [data for piece in s.iter_bytes() for data in decoder.data(piece)]
    except httpx.HTTPError as exc:
        events = [str(exc).encode()]
    calls.append({"call": "POST /v1/chat/completions (stream)", "status": status,
                  "body": f"{len(events)} events, last {events[-1:]!r}"[:300],
                  "ok": status == 200 and bool(events) and events[-1] == DONE})
    # a stream the client drops after its first event: the frontend aborts the request
    status = None
    try:
        with client.stream("POST", "/v1/completions", timeout=CALL_TIMEOUT_S, json={
                "model": model, "prompt": "drop me", "max_tokens": 200, "stream": True}) as s:
            status = s.status_code
            for _ in s.iter_bytes():
                break
    except httpx.HTTPError as exc:
        calls.append({"call": "POST /v1/completions (stream, dropped)", "status": None, "body": str(exc)[:300]})
    else:
        calls.append({"call": "POST /v1/completions (stream, dropped)", "status": status, "body": "dropped"})
    return calls


def _lora(client: httpx.Client, lora_dir: Path) -> list[dict[str, Any]]:
    load = _call(client, "POST", "/v1/load_lora_adapter", {"lora_name": LORA_NAME, "lora_path": str(lora_dir)})
    use = _call(client, "POST", "/v1/completions", {"model": LORA_NAME, "prompt": "hi", "max_tokens": 3})
    return [load, use]


def _ok(call: dict[str, Any]) -> bool:
    return call.get("ok", call["status"] is not None and 200 <= call["status"] < 300)


def run_pair(frontend: str, engine: str, peers: dict[str, Path], out: Path, lora_dir: Path) -> dict[str, Any]:
    """One ordered pair: start it, drive every feature, stop it; the pair's observed results."""
    name = f"{frontend}-{engine}"
    logdir = out / f"cross-{name}"
    logdir.mkdir(parents=True, exist_ok=True)
    hs, mon, http = free_port(), free_port(), free_port()
    events = logdir / "monitor-events.jsonl"
    events.unlink(missing_ok=True)
    procs = Group(logdir)
    result: dict[str, Any] = {"frontend": frontend, "engine": engine, "started": False, "features": {},
                              "problem": None}
    lora_env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "TMO": "1200", "FAKE_STEP_DELAY": "0.002"}
    lora_args = ["--enable-lora", "--max-lora-rank", "8"]
    monitor = None
    try:
        procs.start("frontend", [str(peers[frontend] / "run_serve.sh"), "--data-parallel-size-local", "0",
                                 "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(hs),
                                 "--data-parallel-size", "1", "--port", str(http), *lora_args,
                                 "--profiler-config", json.dumps({"profiler": "torch",
                                                                  "torch_profiler_dir": str(logdir / "profile")})],
                    lora_env)
        monitor = procs.start("monitor", [sys.executable, "-m", "ecp.spec.cli", "monitor", "--listen",
                                          f"tcp://127.0.0.1:{mon}", "--frontend", f"tcp://127.0.0.1:{hs}",
                                          "--frontend-vllm", frontend, "--engine-vllm", engine,
                                          "--events", str(events), "--report-json", str(logdir / "monitor.json"),
                                          "--record", str(logdir / "capture.txt"), "--console-interval", "0"], {})
        procs.start("engine", [str(peers[engine] / "run_serve.sh"), "--headless", "--data-parallel-address",
                               "127.0.0.1", "--data-parallel-rpc-port", str(mon), "--data-parallel-size", "1",
                               "--data-parallel-size-local", "1", *lora_args], lora_env)
        findings = _Findings(events)
        with httpx.Client(base_url=f"http://127.0.0.1:{http}", timeout=CALL_TIMEOUT_S) as client:
            result["problem"] = wait_healthy(client, procs, START_BUDGET_S)
            # a pair that never served still reads the monitor's report below: it has the reason
            result["started"] = result["problem"] is None
            model = client.get("/v1/models").json()["data"][0]["id"] if result["started"] else None
            startup = findings.take()
            for feature, (_, routes) in FEATURES.items() if result["started"] else ():
                if feature == "serving":
                    calls = _serving(client, model)
                elif feature == "LoRA":
                    calls = _lora(client, lora_dir)
                else:
                    calls = [_call(client, m, p, body) for m, p, body, where in routes
                             if where is None or frontend in where]
                    if not calls:
                        result["features"][feature] = {"calls": [], "findings": [], "route": False}
                        continue
                found = findings.take()
                if feature == "serving":
                    found = startup + found
                result["features"][feature] = {"calls": calls, "findings": found, "route": True,
                                               "http_ok": all(_ok(c) for c in calls)}
    finally:
        if monitor is not None:
            procs.stop_one(monitor, signal.SIGINT, wait_s=30.0)  # the monitor writes its report at SIGINT
        procs.stop()
    if (logdir / "capture.txt").exists():
        for call in utility_calls(logdir / "capture.txt", engine):
            feature = result["features"].get(METHODS.get(call["method"], "serving"))
            if feature is not None:
                feature.setdefault("utility", []).append(call)
    report = logdir / "monitor.json"
    if report.exists():
        doc = json.loads(report.read_text())
        traffic = doc.get("traffic", {}).get("messages", {})
        result["monitor"] = {"exit_code": doc.get("exit_code"), "messages": traffic,
                             "release": doc.get("release", {}).get("cross")}
        first = next((r.get("first") for r in result["monitor"]["release"] or [] if r.get("first")), None)
        if not result["started"] and first:
            # "frontend exited with status 1" says that it failed; the monitor saw why
            result["problem"] = f"{first} ({result['problem']})"
        serving = result["features"].get("serving")
        if serving is not None:  # the dropped stream must have reached the engine as an ABORT
            serving["aborts"] = traffic.get("to_engine", {}).get("abort", 0)
    return result


def observed_verdict(feature: dict[str, Any]) -> tuple[str, str | None]:
    """A feature's observed result: ``works``, ``breaks`` (a monitor finding, or the engine answered
    a UTILITY call with a failure, or serving lost its ABORT), ``http-error`` (the protocol exchange
    worked, the HTTP call did not) or ``n/a`` (the frontend's release has no route); and the message
    the first break showed in."""
    from ecp.spec.diff.observed import verdict_of

    return verdict_of(feature)


def _lora_adapter(out: Path) -> Path:
    """An adapter directory the frontend accepts (the model-free executor loads no weights)."""
    d = out / "cross-lora-adapter"
    d.mkdir(parents=True, exist_ok=True)
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
                                                       "target_modules": ["q_proj", "v_proj"], "bias": "none"}))
    return d


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def run_cross(releases: list[str], out: Path, observed: Path, only: list[str] | None = None) -> int:
    peers = {r: Path(f"~/.cache/vllm-peer-{r}").expanduser() for r in releases}
    missing = [r for r, p in peers.items() if not (p / "run_serve.sh").exists()]
    if missing:
        print(f"interop_matrix --cross: no vLLM peer for {', '.join(missing)} "
              f"(VLLM_VERSION=X.Y.0 bash ../shared/peers/vllm/SETUP.sh)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    lora_dir = _lora_adapter(out)
    doc = json.loads(observed.read_text()) if observed.exists() else {}
    pairs = {(p["frontend"], p["engine"]): p for p in doc.get("pairs", [])}
    for f in releases:
        for e in releases:
            if only and f"{f}:{e}" not in only:
                continue
            started = time.monotonic()
            result = run_pair(f, e, peers, out, lora_dir)
            result["seconds"] = round(time.monotonic() - started)
            pairs[(f, e)] = result
            summary = {k: observed_verdict(v)[0] for k, v in result["features"].items()}
            print(f"{f} frontend, {e} engine: {result['problem'] or summary} ({result['seconds']}s)", flush=True)
            # the pairs not run this time are kept, with their releases
            known = sorted({*doc.get("releases", []), *releases}, key=_version)
            doc = {"releases": known, "features": {k: v[0] for k, v in FEATURES.items()},
                   "pairs": [pairs[k] for k in sorted(pairs, key=lambda k: (_version(k[0]), _version(k[1])))]}
            observed.parent.mkdir(parents=True, exist_ok=True)
            observed.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(p.get("started") for p in pairs.values()) else 1
