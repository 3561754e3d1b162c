"""``ecp interop run``: a configured set of implementations x releases x roles, each pair one
``ecp conformance`` run with ``--results``, collected in one results set (a folder), resuming where
it stopped.

The set's folder holds one folder per run (``ROLE--IMPLEMENTATION--RELEASE/result.json`` with its
transcripts and the run's console output, ``console.log``) and ``set.json``: when it was made, with
which ecp, on which machine, what was configured and what could not run (``missing``: a release whose
peer is not installed, with why). A run whose folder already has a ``result.json`` is not run again;
a run that ended without writing one (its peer never started, the harness refused the command) gets
a ``result.json`` that says so, with the cause: the launch's reason, else the tail of its output.

What runs (:func:`builtin`): the reference peers of every shipped release in both roles (``ecp
engine --vllm R``, ``ecp serve --vllm R``), and the real vLLM peers of every release from
:data:`VLLM_FROM` on whose peer is installed (``~/.cache/vllm-peer-R``,
``../shared/peers/vllm/SETUP.sh``): the headless engine core at DP=1 and DP=2, the Python frontend
and vllm-rs, with the release's expected failures where ecp ships them
(:mod:`.vllm_peers`). ``--config FILE`` adds any command (``docs/interop-site.md``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import results as res
from .vllm_peers import conformance_rows, ecp_cli, peer_dir, peer_version

#: the oldest vLLM release whose real peer ../shared/peers/vllm/ runs
VLLM_FROM = "0.23"
#: the longest one conformance run may take before ``interop run`` stops it (a real vLLM run with
#: its replacements takes minutes; this only ends a hung run)
RUN_BUDGET_S = 3600.0
SET_FILE = "set.json"


class ConfigError(Exception):
    """A configuration file that cannot be used (usage error, exit 2)."""


@dataclass
class Implementation:
    """One implementation in one role: ``argv(release)`` is its ``ecp conformance`` command line."""

    name: str
    role: str
    releases: list[str]
    #: ``ecp conformance ROLE`` options before ``--`` (``{release}`` is filled in)
    options: list[str]
    #: the command under test after ``--`` (``{release}`` filled in; the harness fills the others)
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    #: release -> why it cannot run here (a peer not installed)
    missing: dict[str, str] = field(default_factory=dict)
    #: release -> the implementation's version
    versions: dict[str, str] = field(default_factory=dict)
    #: release -> (options, command) where they differ by more than ``{release}`` (a release's peer
    #: folder and expected-failures file)
    per_release: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)

    def argv(self, release: str) -> list[str]:
        """The ``ecp conformance`` command line of one release (``{release}`` and ``{python}``, this
        interpreter, filled in)."""
        options, command = self.per_release.get(release, (self.options, self.command))
        fill = [a.replace("{release}", release).replace("{python}", sys.executable) for a in [*options, "--", *command]]
        return [*ecp_cli(), "conformance", self.role, *fill]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def run_dir(out: Path, impl: Implementation, release: str) -> Path:
    return out / f"{impl.role}--{slug(impl.name)}--{release}"


def _shipped() -> list[str]:
    from ecp.spec.profile import shipped_releases

    return list(shipped_releases())


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def reference_peers() -> list[Implementation]:
    """``ecp engine`` and ``ecp serve`` speaking every shipped release, judged as that release."""
    from .results import ecp_version

    releases = _shipped()
    version = {r: ecp_version() for r in releases}
    return [
        Implementation("ecp engine", "engine", releases, ["--vllm", "{release}"],
                       ["{python}", "-m", "ecp.spec.cli", "engine", "--vllm", "{release}",
                        "--handshake-address", "{handshake_address}", "--engine-count", "{engine_count}"],
                       versions=version),
        Implementation("ecp serve", "frontend", releases, ["--vllm", "{release}"],
                       ["{python}", "-m", "ecp.spec.cli", "serve", "--vllm", "{release}",
                        "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
                        "--data-parallel-rpc-port", "{handshake_port}", "--data-parallel-size", "{engine_count}",
                        "--port", "{http_port}"], versions=version),
    ]


#: the rows of :func:`.vllm_peers.conformance_rows` and the implementation name each stands for
VLLM_ROWS = {"engine-dp1": "vllm engine core DP=1", "engine-dp2": "vllm engine core DP=2",
             "python-frontend": "vllm python frontend", "vllm-rs": "vllm-rs"}


def vllm_peers(root: Path | None = None, level: str = "hardened") -> list[Implementation]:
    """vLLM's engine core (DP=1, DP=2), Python frontend and vllm-rs of every shipped release from
    :data:`VLLM_FROM` on; a release without an installed peer is listed as missing, with why."""
    releases = [r for r in _shipped() if _key(r) >= _key(VLLM_FROM)]
    impls: dict[str, Implementation] = {}
    for release in releases:
        peer = peer_dir(release, root)
        for row in conformance_rows(peer, level, release):
            name = VLLM_ROWS[row.name]
            argv = list(row.argv)
            # ecp ships expected failures for some releases only: without them every failure counts
            if "--expected-failures" in argv:
                k = argv.index("--expected-failures")
                if not Path(argv[k + 1]).exists():
                    del argv[k:k + 2]
            sep = argv.index("--")
            role = argv[argv.index("conformance") + 1]
            impl = impls.setdefault(name, Implementation(name, role, [], [], [], dict(row.env)))
            impl.releases.append(release)
            impl.versions[release] = peer_version(peer) or ""
            # options and command name the release's peer folder and expected failures: kept per release
            impl.per_release[release] = (argv[argv.index(role) + 1:sep], argv[sep + 1:])
            if not (peer / "run_serve.sh").exists():
                shown = str(peer).replace(str(Path.home()), "~", 1)
                impl.missing[release] = (f"no vLLM {release} peer installed at {shown} "
                                         f"(../shared/peers/vllm/SETUP.sh installs one: about 2.5 GB)")
    return list(impls.values())


def builtin(root: Path | None = None, level: str = "hardened") -> list[Implementation]:
    return reference_peers() + vllm_peers(root, level)


def load_config(path: Path) -> list[Implementation]:
    """Implementations a user adds: ``{"implementations": [{"name", "role", "releases", "command",
    "options"?, "env"?, "version"?}]}``."""
    try:
        doc = json.loads(Path(path).read_text())
        out = []
        for k, item in enumerate(doc["implementations"]):
            if item["role"] not in ("engine", "frontend") or not item["command"] or not item["releases"]:
                raise ConfigError(f"{path}: implementations[{k}]: role must be engine or frontend, with a "
                                  "command and releases")
            out.append(Implementation(str(item["name"]), item["role"], [str(r) for r in item["releases"]],
                                      [str(a) for a in item.get("options", ["--vllm", "{release}"])],
                                      [str(a) for a in item["command"]], dict(item.get("env", {})),
                                      versions={str(r): item.get("version") or "" for r in item["releases"]}))
        return out
    except ConfigError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not an interop configuration ({exc!r})") from None


def run_one(impl: Implementation, release: str, out: Path, budget_s: float = RUN_BUDGET_S,
            machine_name: str | None = None) -> dict[str, Any]:
    """Run one pair into its folder; return its document (the one the run wrote, or one that says
    why there is none)."""
    d = run_dir(out, impl, release)
    d.mkdir(parents=True, exist_ok=True)
    argv = impl.argv(release)
    sep = argv.index("--")
    argv[sep:sep] = ["--results", str(d), "--implementation", impl.name,
                     *(["--implementation-version", impl.versions[release]] if impl.versions.get(release) else []),
                     *(["--machine", machine_name] if machine_name else [])]
    started, t0 = res.now(), time.monotonic()
    try:
        proc = subprocess.run(argv, env={**os.environ, **impl.env}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=budget_s, cwd=res.ecp_root())
        output, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        output += f"\n(stopped by ecp interop run after {budget_s:g}s)"
        code = 124
    (d / "console.log").write_text(shlex.join(argv) + "\n\n" + output)
    path = d / res.RESULT_FILE
    if path.exists():
        return json.loads(path.read_text())
    tail = [ln for ln in output.strip().splitlines() if ln.strip()][-3:]
    doc = res.document(
        implementation={"name": impl.name, "version": impl.versions.get(release) or None, "commit": None},
        role=impl.role, release=release, level=_option(argv, "--level", "hardened"), strict="--strict" in argv,
        started=started, duration_s=time.monotonic() - t0, target=shlex.join(argv[argv.index("--") + 1:]),
        exit_code=code, counts={}, problems=[], launches=None, release_fit=None, cases=[],
        expected_failures=res.shown_path(_option(argv, "--expected-failures", None)), machine_name=machine_name,
        served_={"ok": False, "cause": " / ".join(tail) or f"exit {code} with no output"})
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _option(argv: list[str], name: str, default: Any) -> Any:
    return argv[argv.index(name) + 1] if name in argv[:argv.index("--")] else default


def run_set(impls: list[Implementation], out: Path, *, releases: list[str] | None = None,
            machine_name: str | None = None, budget_s: float = RUN_BUDGET_S, say=print,
            known: list[Implementation] | None = None) -> int:
    """Run every configured pair not run yet into ``out``; write ``set.json``; return the number of
    runs that did not pass (0: every run passed). ``known``: every implementation configured, of which
    ``impls`` may be a selection: a pair the set recorded as missing whose peer is installed now, but
    which this invocation does not run, is recorded as not run, with the command that runs it."""
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / SET_FILE
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {
        "started": res.now(), "ecp": {"version": res.ecp_version(), "commit": res.ecp_commit()},
        "machine": res.machine(machine_name), "configured": [], "missing": []}
    failed = 0

    def save() -> None:
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")

    by_name = {i.name: i for i in (known or impls)}
    for m in meta["missing"]:  # a missing peer installed since: say so, rather than what is no longer true
        impl = by_name.get(m["implementation"])
        if impl is not None and m["release"] not in impl.missing and not run_dir(out, impl, m["release"]).exists():
            m["why"] = (f"not run in this set, though its vLLM {m['release']} peer is installed here now: "
                        f"ecp interop run --out {out} --only '{impl.name}' --release {m['release']}")
            save()

    for impl in impls:
        for release in impl.releases:
            if releases and release not in releases:
                continue
            entry = {"implementation": impl.name, "role": impl.role, "release": release}
            if entry not in meta["configured"]:
                meta["configured"].append(entry)
            if release in impl.missing:
                if not any(m["implementation"] == impl.name and m["release"] == release for m in meta["missing"]):
                    meta["missing"].append({**entry, "why": impl.missing[release]})
                say(f"{impl.role:<8} {impl.name:<24} {release:<6} missing: {impl.missing[release]}")
                save()
                continue
            meta["missing"] = [m for m in meta["missing"]
                               if not (m["implementation"] == impl.name and m["release"] == release)]
            done = run_dir(out, impl, release) / res.RESULT_FILE
            if done.exists():
                doc = json.loads(done.read_text())
                say(f"{impl.role:<8} {impl.name:<24} {release:<6} done before: exit {doc['exit_code']}")
            else:
                save()
                doc = run_one(impl, release, out, budget_s, machine_name)
                say(f"{impl.role:<8} {impl.name:<24} {release:<6} exit {doc['exit_code']} in "
                    f"{doc['duration_s']:.0f}s" + ("" if doc["served"]["ok"] else
                                                   f": never served: {doc['served']['cause']}"))
            failed += doc["exit_code"] != 0
    meta["finished"] = res.now()
    save()
    return failed


def describe(impls: list[Implementation]) -> list[str]:
    lines = []
    for impl in impls:
        for release in impl.releases:
            why = impl.missing.get(release)
            lines.append(f"{impl.role:<8} {impl.name:<24} {release:<6} "
                         + (f"missing: {why}" if why else shlex.join(impl.argv(release))))
    return lines


