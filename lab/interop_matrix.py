"""The real-vLLM interop matrix in one command (needs the vLLM 0.33 peer; never in CI).

    python -m lab.interop_matrix [--peer ~/.cache/vllm-peer-0.33] [--out interop-results]
                                        [--only ROW ...] [--level interop|hardened] [--list]
                                        [--release 0.32]   # engine rows: judged as that release
    python -m lab.interop_matrix --cross 0.31,0.32,0.33 [--pairs A:B ...]   # lab/cross_release.py

Rows, run one at a time (each real vLLM launch takes 10-30 s of CPU on a small machine):

* ``engine-dp1``, ``engine-dp2``: ``ecp conformance engine`` against vLLM's headless engine core
  (real ``EngineCoreProc``, model-free executor), with ``conformance/expected/vllm-0.33-engine.txt``
  (``--forked``: the engine cores forked by ``lab/vllm_forked_serve.sh``, not spawned;
  ``--prefork``: every launch a fork of one process that imported vLLM once, ``lab/vllm_prefork.py``);
* ``python-frontend``, ``vllm-rs``: ``ecp conformance frontend`` against vLLM's Python frontend and
  against vllm-rs, with their expected-failure files;
* ``ecp-engine-behind-vllm-dp1``, ``…-dp2``, ``ecp-engine-behind-vllm-rs``: vLLM's frontend serving
  our reference engines (``ecp engine``): a completion and a streamed chat must finish;
* ``ecp-serve-before-vllm-dp1``, ``…-dp2``: ``ecp serve`` in front of vLLM's headless engines.

Each conformance row writes ``ROW.json`` and ``ROW.md`` under ``--out`` (each report lists the
row's launches with their start-up times); the script prints one Markdown table of every row, with
the number of launches of each conformance row, and exits 0 only when every row passed. No row
needs a timeout flag: the suite's budgets follow the peer's measured pace. The peer is the directory that
``../shared/peers/vllm-0.33/SETUP.sh`` (or the equivalent for a new release) created: it holds
``run_serve.sh`` and ``models/tiny-llama``. See ``docs/interop.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ecp.conformance.frontend.launcher import free_port
from ecp.conformance.interop.vllm_peers import REPO, Row, conformance_rows, ecp_cli
from ecp.spec.sse import DONE, SseDecoder

#: seconds a real vLLM process group gets to come up (API server import + engine core start)
START_BUDGET_S = 180.0


def smoke_rows() -> list[Row]:
    return [
        Row("ecp-engine-behind-vllm-dp1", "ecp engine (1) behind vLLM Python frontend", smoke=("vllm", 1, False)),
        Row("ecp-engine-behind-vllm-dp2", "ecp engine (2) behind vLLM Python frontend", smoke=("vllm", 2, False)),
        Row("ecp-engine-behind-vllm-rs", "ecp engine (2) behind vllm-rs", smoke=("vllm", 2, True)),
        Row("ecp-serve-before-vllm-dp1", "ecp serve in front of vLLM headless engine core (1)",
            smoke=("ecp", 1, False)),
        Row("ecp-serve-before-vllm-dp2", "ecp serve in front of vLLM headless engine cores (2)",
            smoke=("ecp", 2, False)),
    ]


def wait_healthy(client: "httpx.Client", group: "Group", budget_s: float = START_BUDGET_S) -> str | None:
    """Poll ``GET /health`` until it answers 200 (None) or the group's processes die or ``budget_s``
    passes (what went wrong)."""
    end = time.monotonic() + budget_s
    while True:
        if group.dead():
            return "; ".join(group.dead())
        try:
            if client.get("/health", timeout=2.0).status_code == 200:
                return None
        except httpx.HTTPError:
            pass
        if time.monotonic() > end:
            return f"/health never answered 200 within {budget_s:g}s"
        time.sleep(0.5)  # polling a server that is starting: there is no event to wait on


class Group:
    """Processes started for one row or pair, each in its own process group (its log in ``logdir``),
    all stopped at the end; ``lab/cross_release.py`` and ``vllm_known_issues.py`` use it too."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logdir / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **(env or {})})
        self.procs.append((name, proc))
        return proc

    def dead(self) -> list[str]:
        return [f"{n} exited with status {p.returncode}" for n, p in self.procs if p.poll() is not None]

    @staticmethod
    def stop_one(proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 10.0) -> None:
        """``sig`` to the process's group, then SIGKILL if it has not exited within ``wait_s``."""
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def stop(self) -> None:
        for _, proc in self.procs:  # every group signalled first, so that they stop side by side
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.procs:
            self.stop_one(proc)


def run_smoke(row: Row, peer: Path, logdir: Path) -> tuple[bool, str]:
    """Start the pair, wait for /health 200, then one completion and one streamed chat must finish."""
    kind, dp, rust = row.smoke  # type: ignore[misc]
    hs, http = free_port(), free_port()
    group = Group(logdir)
    try:
        if kind == "vllm":
            group.start("vllm-frontend", [str(peer / "run_serve.sh"), "--data-parallel-size-local", "0",
                                          "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port",
                                          str(hs), "--data-parallel-size", str(dp), "--port", str(http)],
                        {"VLLM_USE_RUST_FRONTEND": "1"} if rust else {})
            group.start("ecp-engine", [*ecp_cli(), "engine", "--handshake-address", f"tcp://127.0.0.1:{hs}",
                                       "--engine-count", str(dp), "--vocab-size", "332", "--max-model-len", "256"])
        else:
            group.start("ecp-serve", [*ecp_cli(), "serve", "--data-parallel-size-local", "0",
                                      "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(hs),
                                      "--data-parallel-size", str(dp), "--port", str(http)])
            group.start("vllm-engines", [str(peer / "run_serve.sh"), "--headless", "--data-parallel-size", str(dp),
                                         "--data-parallel-size-local", str(dp), "--data-parallel-address",
                                         "127.0.0.1", "--data-parallel-rpc-port", str(hs)])
        base = f"http://127.0.0.1:{http}"
        with httpx.Client(base_url=base, timeout=30.0) as client:
            problem = wait_healthy(client, group)
            if problem:
                return False, problem
            model = client.get("/v1/models").json()["data"][0]["id"]
            done = []
            for k in range(2 * dp):  # enough requests to reach every engine
                r = client.post("/v1/completions", json={"model": model, "prompt": f"hello {k}", "max_tokens": 5})
                if r.status_code != 200:
                    return False, f"completion {k}: HTTP {r.status_code} {r.text[:200]}"
                done.append(r.json()["usage"]["completion_tokens"])
            if any(n != 5 for n in done):
                return False, f"completion_tokens {done}, expected 5 each"
            with client.stream("POST", "/v1/chat/completions", json={
                    "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                    "stream": True}) as s:
                decoder = SseDecoder()
                events = [data for piece in s.iter_bytes() for data in decoder.data(piece)]
            if s.status_code != 200 or not events or events[-1] != DONE:
                return False, f"streamed chat: HTTP {s.status_code}, last event {events[-1:]!r}"
        return True, f"{len(done)} completions of 5 tokens and a streamed chat ({len(events)} events) finished"
    finally:
        group.stop()


@contextlib.contextmanager
def prefork_server(row: Row, logdir: Path):
    """A vllm_prefork.py server for the row's launches: yields the environment that sends them to it
    and the seconds the server took to come up (``{}, None`` when the row does not prefork), and
    stops the server and its launches after the row."""
    if not row.prefork:
        yield {}, None
        return
    sock = Path(tempfile.mkdtemp(prefix="ecp-prefork-")) / "launch.sock"
    started = time.monotonic()
    with open(logdir / "prefork-server.log", "wb") as log:
        proc = subprocess.Popen([str(REPO / "lab" / "vllm_forked_serve.sh"), "--prefork-server", str(sock)],
                                env={**os.environ, **row.env}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() - started > START_BUDGET_S:
                raise RuntimeError(f"the prefork server did not start (see {logdir / 'prefork-server.log'})")
            time.sleep(0.1)
        yield {"VLLM_PREFORK": str(sock)}, time.monotonic() - started
    finally:
        Group.stop_one(proc)
        shutil.rmtree(sock.parent, ignore_errors=True)


def run_conformance(row: Row, out: Path) -> tuple[bool, str]:
    argv = list(row.argv)
    sep = argv.index("--")
    argv[sep:sep] = ["--json", str(out / f"{row.name}.json"), "--markdown", str(out / f"{row.name}.md")]
    started = time.monotonic()
    try:
        with prefork_server(row, out / row.name) as (prefork_env, ready_s):
            proc = subprocess.run(argv, env={**os.environ, **row.env, **prefork_env}, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    except RuntimeError as exc:
        return False, str(exc)
    (out / f"{row.name}.log").write_text(proc.stdout)
    last = [ln for ln in proc.stdout.splitlines() if " role against " in ln]
    launches = [ln for ln in proc.stdout.splitlines() if ln.startswith("launches: ")]
    return proc.returncode == 0, (last[-1] if last else proc.stdout[-300:]) + \
        f" (exit {proc.returncode}, {time.monotonic() - started:.0f}s" + \
        (f" including the prefork server's {ready_s:.1f}s start" if ready_s is not None else "") + \
        (f"; {launches[-1].split(';')[0]})" if launches else ")")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default="0.33", metavar="X",
                    help="the vLLM release of the peer: the suite rows run `--vllm X` with "
                         "conformance/expected/vllm-X-*.txt (default 0.33)")
    ap.add_argument("--peer", type=Path, default=None,
                    help="the peer directory with run_serve.sh (default ~/.cache/vllm-peer-RELEASE)")
    ap.add_argument("--out", type=Path, default=Path("interop-results"), help="reports and logs go here")
    ap.add_argument("--only", nargs="+", metavar="ROW", help="run only these rows")
    ap.add_argument("--level", choices=("interop", "hardened"), default="hardened",
                    help="conformance level of the suite rows (default hardened)")
    ap.add_argument("--forked", action="store_true",
                    help="engine rows: start vLLM's engine cores with lab/vllm_forked_serve.sh (forked from "
                         "`vllm serve`, not spawned: half the CPU per launch; the same engine core)")
    ap.add_argument("--prefork", action="store_true",
                    help="engine rows: every launch a fork of one process that imported vLLM once "
                         "(lab/vllm_prefork.py, started and stopped by the row; implies --forked)")
    ap.add_argument("--list", action="store_true", help="print the rows and their commands, run nothing")
    ap.add_argument("--cross", metavar="A,B,...",
                    help="instead of the rows: every ordered pair of these releases, a real frontend of one in "
                         "front of a real engine core of the other through ecp monitor (lab/cross_release.py)")
    ap.add_argument("--observed", type=Path, default=REPO / "spec" / "compat" / "observed-cross.json",
                    help="with --cross: the results file (default spec/compat/observed-cross.json; pairs not run "
                         "are kept)")
    ap.add_argument("--pairs", nargs="+", metavar="A:B", help="with --cross: run only these frontend:engine pairs")
    args = ap.parse_args()
    if args.cross:
        from lab.cross_release import run_cross

        return run_cross(args.cross.split(","), args.out, args.observed, args.pairs)
    args.peer = args.peer or Path(f"~/.cache/vllm-peer-{args.release}").expanduser()
    rows = conformance_rows(args.peer, args.level, args.release, args.forked, args.prefork) + smoke_rows()
    if args.only:
        unknown = set(args.only) - {r.name for r in rows}
        if unknown:
            ap.error(f"unknown row(s) {sorted(unknown)}; known: {[r.name for r in rows]}")
        rows = [r for r in rows if r.name in args.only]
    if args.list:
        for r in rows:
            env = " ".join(f"{k}={v}" for k, v in r.env.items())
            env += " VLLM_PREFORK=SOCKET (a vllm_prefork.py server's)" if r.prefork else ""
            print(f"{r.name}: {r.what}\n  {env + ' ' if env else ''}{shlex.join(r.argv) if r.argv else '(smoke)'}")
        return 0
    if not (args.peer / "run_serve.sh").exists():
        print(f"interop_matrix: no vLLM peer at {args.peer} (run shared/peers/vllm-0.33/SETUP.sh)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    print("| row | what | result |\n|---|---|---|", flush=True)
    ok_all = True
    for row in rows:
        logdir = args.out / row.name
        logdir.mkdir(exist_ok=True)
        ok, detail = run_smoke(row, args.peer, logdir) if row.smoke else run_conformance(row, args.out)
        ok_all &= ok
        print(f"| {row.name} | {row.what} | {'PASS' if ok else 'FAIL'}: {detail} |", flush=True)
        with (args.out / "matrix.jsonl").open("a") as f:
            f.write(json.dumps({"row": row.name, "ok": ok, "detail": detail}) + "\n")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
