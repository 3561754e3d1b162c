"""The real vLLM peers as conformance rows: the commands that put vLLM's headless engine core (DP=1,
DP=2), its Python frontend and vllm-rs under ``ecp conformance``, with the release's expected
failures. ``ecp interop run`` and ``lab/interop_matrix.py`` both launch them from here.

A peer is the directory ``../shared/peers/vllm/SETUP.sh`` creates for one release
(``~/.cache/vllm-peer-RELEASE``: ``run_serve.sh``, ``venv``, ``models/tiny-llama``). The forked and
prefork launchers are scripts of the ecp checkout (``lab/vllm_forked_serve.sh``), started by
path, never imported.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

#: the ecp checkout (the package runs from it; benchmarks/ holds the forked launchers)
REPO = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).resolve().parents[1] / "expected"
#: per fake-executor decode step: a real model's step is >= 1 ms; at 0 a 248-token request ends
#: before an ABORT sent after its first token can arrive (docs/interop.md)
FAKE_STEP_DELAY = "0.002"


@dataclass
class Row:
    name: str
    what: str
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    smoke: tuple[str, int, bool] | None = None  # (frontend kind, dp size, rust)
    prefork: bool = False  # launches through a vllm_prefork.py server that the row starts and stops


def ecp_cli() -> list[str]:
    return [sys.executable, "-m", "ecp.spec.cli"]


def conformance_rows(peer: Path, level: str, release: str = "0.33", forked: bool = False,
                     prefork: bool = False) -> list[Row]:
    forked = forked or prefork
    serve = str(peer / "run_serve.sh")
    # --forked: the same engine core started by vllm_forked_serve.sh, which forks it instead of spawning it
    engine_serve = str(REPO / "lab" / "vllm_forked_serve.sh") if forked else serve
    headless = [engine_serve, "--headless", "--data-parallel-size", "{engine_count}", "--data-parallel-size-local",
                "{engine_count}", "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port",
                "{handshake_port}"]
    frontend = [serve, "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
                "--data-parallel-rpc-port", "{handshake_port}", "--data-parallel-size", "{engine_count}",
                "--port", "{http_port}"]
    # the documented commands as written: no timeout flag (the first launch's default budget is 180 s,
    # later ones follow the measured pace)
    common = ["--level", level]
    # what these peers lack, declared (docs/interop.md): the model-free executor returns no logprobs,
    # and vLLM 0.33 runs DP waves for MoE models only
    engine_lacks = ["--engine-lacks", "logprobs", "--engine-lacks", "dp_waves"]
    # the frontend rows judge the peer as its release, with that release's expected failures (--release)
    frontend_lacks = ["--frontend-lacks", "dp_waves", "--vllm", release]
    rows = []
    for dp in (1, 2):
        rows.append(Row(f"engine-dp{dp}", f"suite (engine role) vs vLLM headless engine core, DP={dp}",
                        [*ecp_cli(), "conformance", "engine", "--transport", "tcp", "--engine-count", str(dp),
                         "--vllm", release, *common, *engine_lacks,
                         "--expected-failures", str(EXPECTED / f"vllm-{release}-engine.txt"), "--", *headless],
                        {"FAKE_STEP_DELAY": FAKE_STEP_DELAY, **({"PEER": str(peer)} if forked else {})},
                        prefork=prefork))
    rows.append(Row("python-frontend", "suite (frontend role) vs vLLM Python frontend, DP=2",
                    [*ecp_cli(), "conformance", "frontend", *common, *frontend_lacks, "--expected-failures",
                     str(EXPECTED / f"vllm-{release}-python-frontend.txt"), "--", *frontend]))
    rows.append(Row("vllm-rs", "suite (frontend role) vs vllm-rs, DP=2",
                    [*ecp_cli(), "conformance", "frontend", *common, *frontend_lacks, "--expected-failures",
                     str(EXPECTED / f"vllm-{release}-vllm-rs.txt"), "--", *frontend],
                    {"VLLM_USE_RUST_FRONTEND": "1"}))
    return rows


def peer_dir(release: str, root: Path | None = None) -> Path:
    """Where ``SETUP.sh`` puts the peer of ``release`` (``ROOT`` or ``~/.cache``)."""
    return (root or Path("~/.cache").expanduser()) / f"vllm-peer-{release}"


def peer_version(peer: Path) -> str | None:
    """The vLLM version installed in a peer (its wheel's dist-info name), or None."""
    for d in sorted(peer.glob("venv/lib/python*/site-packages/vllm-*.dist-info")):
        return d.name[len("vllm-"):-len(".dist-info")]
    return None
