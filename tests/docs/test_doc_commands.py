"""Every command in docs/ that needs no real vLLM, GPU or long run runs here as written, so a doc
cannot drift from the CLI.

The commands are extracted from the docs' code blocks (continuation lines joined, a leading ``$ ``
and a trailing ``# comment`` dropped). Each one is matched by exactly one rule of :data:`RULES`:
it runs (a check of its own below), or it is left out with the reason the rule states. A command
that no rule matches fails the test: a new command in docs/ is run here or given a reason.

How the runs are kept cheap, without changing what the command says:

* a conformance run gets ``--case`` for one or two cases (the full runs are elsewhere in the suite:
  tests/conformance/test_engine_role.py, tests/spec/test_distribution.py for README line 1);
* an explorer run's ``--budget`` is cut to 2 s;
* a command that writes files runs in a scratch directory, with the inputs it names (a capture,
  the expected-failures file of the example) made there first;
* ``ecp serve`` (the quick start's) runs until the ``curl`` line below it got its completion.

Left out, with their reasons in :data:`RULES`: what needs real vLLM or the torch executor, synopses
with elided parts, the example CI workflows' steps that need the engine's own repository, benchmark
scripts, and the multi-process server sessions on fixed ports (DP serve, frontend-only serve with
an engine, the monitor between them: their tests start the same commands on free ports).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
_BLOCK = re.compile(r"^```([a-z]*)\n(.*?)^```", re.S | re.M)
_COMMAND = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:(?:ecp|python|pip|curl|bash|pytest|vllm)(?=\s|$)|\$\w+/)")


@dataclass(frozen=True)
class DocCommand:
    doc: str
    line: int
    text: str
    lang: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def doc_commands() -> list[DocCommand]:
    """Every command line of every code block of docs/*.md, in order, without duplicates."""
    out: dict[str, DocCommand] = {}
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            lang, body = m.group(1), m.group(2)
            start = text[:m.start()].count("\n") + 2
            logical, first = "", 0
            for k, raw in enumerate(body.splitlines()):
                line = raw.strip()
                if line.startswith("$ "):
                    line = line[2:]
                if lang == "yaml":
                    line = re.sub(r"^- run: |^run: \|?", "", line).strip()
                if not logical:
                    first = start + k
                if line.endswith("\\"):
                    logical += line[:-1] + " "
                    continue
                logical += line
                command = re.sub(r"\s+#\s.*$", "", logical).strip()
                logical = ""
                if _COMMAND.match(command) and command not in out:
                    out[command] = DocCommand(path.name, first, command, lang)
    return list(out.values())


def _run(argv: str, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """``argv`` through the shell, as a reader pastes it, with this interpreter's ``ecp`` on PATH."""
    environ = {**os.environ, **(env or {})}
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=environ)


def _ran_and_judged(proc: subprocess.CompletedProcess, ok: tuple[int, ...] = (0,)) -> None:
    """The CLI accepted the command as written: no usage error, no traceback, the expected exit."""
    assert "Traceback" not in proc.stderr and "usage:" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode in ok, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _with_cases(command: str, *cases: str) -> str:
    """The command with ``--case`` options after its ``ecp conformance ROLE`` (a shorter run)."""
    m = re.search(r"ecp conformance (engine|frontend)\b", command)
    assert m, command
    extra = "".join(f" --case {c}" for c in cases)
    return command[:m.end()] + extra + command[m.end():]


# ------------------------------------------------------------------------------------- checks
def check_plain(cmd: DocCommand, tmp: Path) -> None:
    _ran_and_judged(_run(cmd.text, tmp))


def check_conformance_one_case(cmd: DocCommand, tmp: Path) -> None:
    role = "frontend" if "conformance frontend" in cmd.text else "engine"
    first = "FE-HS-1" if role == "frontend" else "ENG-HS-1"
    proc = _run(_with_cases(cmd.text, first), tmp)
    _ran_and_judged(proc)
    assert re.search(r": 1 PASS in [0-9.]+s .*-> exit 0$", proc.stdout.strip()), proc.stdout[-2000:]


def check_expected_failures_example(cmd: DocCommand, tmp: Path) -> None:
    """The example expected-failures file of docs/conformance.md, saved as the command names it:
    a listed case that fails is XFAIL, the racy entry accepts a PASS, the run exits 0."""
    text = (DOCS / "conformance.md").read_text(encoding="utf-8")
    block = next(m.group(2) for m in _BLOCK.finditer(text) if m.group(2).startswith("# my-engine.xfail"))
    name = re.search(r"--expected-failures (\S+)", cmd.text).group(1)
    (tmp / name).write_text(block, encoding="utf-8")
    # paced: ENG-ROB-8's long requests must still run at the SIGTERM (unpaced, a loaded machine may
    # see the reference engine finish them first: UNSUPPORTED, which the racy entry does not accept)
    proc = _run(_with_cases(cmd.text, "ENG-UTIL-5", "ENG-ROB-8") + " --step-time-ms 1", tmp)
    _ran_and_judged(proc)
    assert re.search(r": 1 PASS, 1 XFAIL in [0-9.]+s .*-> exit 0$", proc.stdout.strip()), proc.stdout[-2000:]


def check_explore(cmd: DocCommand, tmp: Path) -> None:
    short = re.sub(r"--budget \S+", "--budget 2s", cmd.text)
    proc = _run(short, tmp, timeout=150)
    _ran_and_judged(proc)
    assert re.search(r"\d+ session\(s\), \d+ message\(s\) judged", proc.stdout + proc.stderr), proc.stdout[-2000:]


def check_compat(cmd: DocCommand, tmp: Path) -> None:
    """``ecp spec compat --out docs/compatibility.md`` from the repository writes what is checked in."""
    (tmp / "docs").mkdir()
    _ran_and_judged(_run(cmd.text, tmp))
    assert (tmp / "docs" / "compatibility.md").read_text(encoding="utf-8") == \
        (DOCS / "compatibility.md").read_text(encoding="utf-8")


def check_with_capture(cmd: DocCommand, tmp: Path) -> None:
    """A command reading ``capture.txt``: a capture the monitor writes (a session with two violations)."""
    from ecp.conformance.monitor.capture import CaptureWriter
    from ecp.conformance.monitor.observed import Observed
    from ecp.spec import Hello, encode_abort, encode_handshake

    writer = CaptureWriter(tmp / "capture.txt")
    for m in (Observed(1, 0.1, "to_frontend", 0, "handshake", None, (encode_handshake(Hello(local=False,
                                                                                            headless=True)),)),
              Observed(2, 0.2, "to_engine", 0, "input", 0, tuple(encode_abort(["a", "b"]))),
              Observed(3, 0.3, "to_engine", 0, "input", 0, (b"\x07", b"\x90"))):  # unknown type byte
        writer.write(m, control=False)
    writer.close()
    proc = _run(cmd.text, tmp)
    _ran_and_judged(proc, ok=(0, 1))  # the monitor judges the capture: its violations exit 1
    assert proc.stdout.strip() or any(tmp.iterdir()), proc


def check_spec_diff_in_workflow(cmd: DocCommand, tmp: Path) -> None:
    """The gate's diff steps, on the layouts the workflow's first steps extract from the merge base
    and the pull request (here two shipped releases', as files at the paths the steps name, moved
    into the scratch directory)."""
    import shutil

    layouts = sorted((REPO / "spec" / "layouts").glob("vllm-*.json"), key=lambda f: tuple(
        int(x) for x in f.stem.removeprefix("vllm-").split(".")))
    shutil.copy(layouts[-2], tmp / "base-layout.json")
    shutil.copy(layouts[-1], tmp / "pr-layout.json")
    command = cmd.text
    for name in ("base-layout.json", "pr-layout.json", "protocol.md"):
        command = command.replace(f"/tmp/{name}", str(tmp / name))
    _ran_and_judged(_run(command, tmp), ok=(0, 1))  # 1: the gate found a break between the releases


def check_decode(cmd: DocCommand, tmp: Path) -> None:
    """``ecp decode`` prints what the doc shows below the command: each ``"key": value`` of the shown
    output (a ``…`` stands for what is left out), and the exit status its comment names (else 0)."""
    import json

    text = (DOCS / cmd.doc).read_text(encoding="utf-8")
    after = text.split(f"$ {cmd.text}\n", 1)[1].split("\n$ ", 1)[0].split("```", 1)[0]
    status = re.search(r"# exit status (\d+)", after)
    proc = _run(cmd.text, tmp)
    _ran_and_judged(proc, ok=(int(status.group(1)) if status else 0,))
    printed = json.loads(proc.stdout)
    shown = re.findall(r'"(\w+)": ("[^"]*"|-?\d+|true|false|null)', after)
    assert shown, after
    for key, value in shown:
        found = printed.get(key, printed.get("value", {}).get(key) if isinstance(printed.get("value"), dict) else None)
        assert found == json.loads(value), (key, value, printed)


def check_serve_then_curl(cmd: DocCommand, tmp: Path) -> None:
    """``ecp serve`` as written (port 8000, one embedded reference engine), then the ``curl`` line the
    doc puts below it, as written: a completion comes back. The server is stopped at the end."""
    import json
    import queue
    import signal
    import socket
    import threading
    import time

    following = [c for c in COMMANDS if c.doc == cmd.doc and c.line > cmd.line]
    curl = next(c for c in following if c.text.startswith("curl "))
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.fail("port 8000 is taken by another process: the documented `ecp serve` cannot bind it")
    environ = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    server = subprocess.Popen(["bash", "-c", f"exec {cmd.text}"], cwd=tmp, env=environ, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in server.stdout:  # type: ignore[union-attr]
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline, seen = time.monotonic() + 60, []
        while True:  # its own line says when it serves (bounded: 60 s), or it exits
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "ecp serve exited:\n" + "".join(seen)
            seen.append(line)
            if line.startswith("ecp serve: serving "):
                break
        answer = _run(curl.text, tmp, timeout=30)
        assert answer.returncode == 0, answer.stderr
        body = json.loads(answer.stdout)
        assert body["object"] == "text_completion" and body["choices"][0]["text"], body
        assert body["usage"]["completion_tokens"] == json.loads(re.search(r"-d '([^']*)'", curl.text).group(1))[
            "max_tokens"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)


# ------------------------------------------------------------------------------------- rules
def skip(reason: str) -> str:
    return reason


#: (pattern on the command, the check that runs it or the reason it is left out); first match wins
RULES: list[tuple[str, Callable[[DocCommand, Path], None] | str]] = [
    # what needs real vLLM (its wheel, a model, the peers of ../shared/peers) or a GPU
    (r"\bvllm serve\b|\$P/|\$PEER\b|PEER=|\.\./shared/peers|VLLM_|FAKE_STEP_DELAY|run_serve\.sh",
     skip("needs a real vLLM peer (../shared/peers/vllm, docs/interop.md)")),
    (r"pip download .*vllm|--from-vllm|vllm-mock-engine", skip("needs a vLLM wheel or vLLM's mock engine")),
    (r"^python -m lab\.|^python -m benchmarks\.serve_compare\b", skip("runs real vLLM peers (a benchmark of docs/interop.md)")),
    (r"--executor torch|OMP_NUM_THREADS=1", skip("the torch executor: about a minute per launch; "
                                                 "tests/gpu/test_conformance_torch.py runs it")),
    (r"--vllm 0\.32 .*--data-parallel-size-local 0", skip("in front of a real vLLM 0.32 engine core")),
    # what is not a runnable line as written
    (r"\.\.\.|…|<any engine>|\[options\]|\bCOMMAND\b|PORT\|ipc|\bFILE\b|\[--",
     skip("a synopsis with elided parts, not a command")),
    (r"^ecp spec diff \"\$pinned\"|cat VLLM_PROTOCOL_RELEASE|\./target/release/my-engine",
     skip("a step of the example CI workflow: needs the engine repository's files")),
    (r"^pip install ", skip("installs the package (tests/spec/test_distribution.py builds and installs the "
                            "wheel)")),
    (r"^ecp spec diff \"\$UPSTREAM\"", skip("a step of the example fork workflow: needs its protocol/layout.json")),
    (r"^ecp spec layout --from-rust crates/engine-client|^ecp spec diff \"\$VLLM\" /tmp/rust-layout\.json",
     skip("a step of the example Rust-project workflow: needs that project's crate; "
          "tests/diff/test_rust.py runs --from-rust and the diff on a fixture crate")),
    (r"^ecp spec layout --from-rust /tmp/vllm-|^ecp spec diff (/tmp/py\.json|vllm-0\.33) /tmp/rust\.json",
     skip("needs vLLM's Rust client, read from vLLM's source at run time")),
    (r"^ecp spec diff (--strict )?/tmp/base-layout\.json /tmp/pr-layout\.json", check_spec_diff_in_workflow),
    (r"\bacme-engine\b", skip("a submission of a third-party engine (acme-engine is the example's name); "
                              "tests/conformance/test_interop_check.py checks made-up submissions")),
    (r"^ecp interop run\b", skip("runs every configured implementation, release and role (minutes; real vLLM "
                                 "where installed); tests/conformance/test_interop_run.py runs a small set")),
    (r"^ecp interop (site|check)\b", skip("needs a results set or a submission folder; tests/conformance/"
                                          "test_interop_site.py and test_interop_check.py make and check them")),
    (r"^ecp spec release list$", check_plain),
    (r"^ecp spec types --check$", check_plain),
    (r"^ecp conformance replay", skip("needs a reproducer an explore run wrote; "
                                      "tests/conformance/test_explore.py replays one")),
    (r"^python -m (benchmarks|campaigns)\.", skip("a benchmark or campaign script (minutes); its seeded short variant is a test")),
    (r"^bash \.\./shared", skip("installs real vLLM")),
    # long-running servers
    (r"^ecp serve$", check_serve_then_curl),
    (r"^curl -s localhost:8000/v1/completions", skip("sent by the check of the `ecp serve` above it")),
    (r"^ecp serve\b|^curl |^ecp monitor --listen|^ecp engine --handshake-address tcp://",
     skip("a server that runs until stopped, on a fixed port; tests/frontend/test_cli.py, "
          "tests/monitor/test_e2e.py start the same commands on free ports")),
    # run as written
    (r"^ecp conformance explore (engine|frontend) .*--budget", check_explore),
    (r"^ecp conformance explore engine .*dead_rank_hider", skip("the dead-rank finding takes its "
                                                                 "--step-timeout per session; tests/conformance/"
                                                                 "test_explore.py runs it")),
    (r"--expected-failures my-engine\.xfail", check_expected_failures_example),
    (r"^ecp conformance (engine|frontend) ", check_conformance_one_case),
    (r"^ecp conformance list", check_plain),
    (r"^ecp spec compat --out docs/compatibility\.md$", check_compat),
    (r"capture\.txt", check_with_capture),
    (r"^ecp decode ", check_decode),
]

COMMANDS = doc_commands()


def _rule(cmd: DocCommand):
    for pattern, action in RULES:
        if re.search(pattern, cmd.text):
            return pattern, action
    return None, None


def test_every_doc_command_is_run_or_has_a_reason():
    assert len(COMMANDS) >= 40  # the extraction sees the docs' commands
    unmatched = [str(c) for c in COMMANDS if _rule(c)[0] is None]
    assert not unmatched, "commands in docs/ that no rule runs or explains:\n" + "\n".join(unmatched)
    ran = [c for c in COMMANDS if callable(_rule(c)[1])]
    assert len(ran) >= 10, [str(c) for c in ran]
    unused = [p for p, _ in RULES if not any(re.search(p, c.text) for c in COMMANDS)]
    assert not unused, f"rules that match no command any more: {unused}"


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [c for c in COMMANDS if callable(_rule(c)[1])], ids=str)
def test_doc_command_runs_as_written(cmd, tmp_path):
    _, check = _rule(cmd)
    check(cmd, tmp_path)
