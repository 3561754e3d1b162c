"""``ecp engine``: run reference engine cores that join a frontend's handshake.

``register`` only declares arguments; the engine modules are imported by the
handler (:func:`ecp.reference.engine.main.run`).
"""

from __future__ import annotations

import argparse

from ecp.spec import VLLM_RELEASE
from ecp.spec.profile.option import add_release_option


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """Every ``ecp engine`` flag (shared with ``python -m ecp.reference.engine``)."""
    g = p.add_argument_group("handshake and topology")
    g.add_argument("--handshake-address", required=True,
                   help="the frontend's handshake ROUTER: tcp://HOST:PORT or ipc:///PATH")
    g.add_argument("--engine-count", type=int, default=1, help="engine cores to run (one DP rank each)")
    g.add_argument("--engine-start-index", type=int, default=0, help="global DP rank of the first engine")
    g.add_argument("--data-parallel-size", type=int, default=None,
                   help="DP size reported in the ready payload (default: start index + count)")
    g.add_argument("--dp-local-index", type=int, default=0, help=argparse.SUPPRESS)
    g.add_argument("--local", action="store_true",
                   help="say HELLO local=true, headless=false (default: a remote headless engine)")
    g.add_argument("--in-process", action="store_true",
                   help="run all ranks as threads of one process instead of one OS process per rank")
    add_release_option(g, "the vLLM release to speak",
                       effect="It sets the wire codec, the ready payload's fields and vllm_version, and the UTILITY "
                              "methods and arities served (a method the release lacks is answered as unknown).")
    g.add_argument("--handshake-timeout-s", type=float, default=300.0,
                   help="give up (exit 1) when INIT or the input connection has not come in this time")
    g.add_argument("--coordinator-timeout-s", type=float, default=300.0,
                   help="give up (exit 1) when the DP coordinator has not sent READY in this time")

    g = p.add_argument_group("scheduler and KV cache (vLLM names)")
    g.add_argument("--max-model-len", type=int, default=4096,
                   help="longest prompt + output; longer prompts get an ERROR output")
    g.add_argument("--block-size", type=int, default=16, help="token positions per KV block")
    g.add_argument("--num-gpu-blocks", type=int, default=None,
                   help="KV blocks (default: the executor's memory model, else 8192)")
    g.add_argument("--max-num-seqs", type=int, default=256, help="most requests running at once")
    g.add_argument("--max-num-batched-tokens", type=int, default=2048,
                   help="token budget of one step (prefill chunks + decodes)")
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                   help="split prompts longer than the step budget over several steps")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse full KV blocks of a common prompt prefix across requests")
    g.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="priority",
                   help="admission order of waiting requests (priority: lower value first, then arrival)")
    g.add_argument("--seed", type=int, default=0,
                   help="engine seed (synthetic tokens; torch: requests without their own seed)")
    g.add_argument("--max-loras", type=int, default=0, help="LoRA slots; 0 disables add_lora")
    g.add_argument("--disable-log-stats", action="store_true", help="never attach scheduler_stats")

    g = p.add_argument_group("executor")
    g.add_argument("--executor", choices=("synthetic", "torch"), default="synthetic",
                   help="synthetic: deterministic hashed tokens; torch: a real transformer (gpu extra)")
    g.add_argument("--vocab-size", type=int, default=32000,
                   help="synthetic: token ids 0..N-1 (torch: the model's vocabulary)")
    g.add_argument("--output-token-chunk-size", type=int, default=1,
                   help="tokens per sampling step (MTP / spec-decode shaped outputs)")
    g.add_argument("--step-time-ms", type=float, default=0.0, help="fixed cost of every step")
    g.add_argument("--prefill-token-cost-us", type=float, default=0.0,
                   help="synthetic: added step time per prefill token")
    g.add_argument("--decode-token-cost-us", type=float, default=0.0,
                   help="synthetic: added step time per decode token")
    g.add_argument("--eos-every", type=int, default=0,
                   help="synthetic: emit EOS as every Nth generated token (0: never)")
    g.add_argument("--eos-token-id", type=int, default=2,
                   help="synthetic: EOS emitted for requests that name none")
    g.add_argument("--device", default="auto", help="torch executor: cpu|cuda|auto")
    g.add_argument("--model", default="random:tiny", help="torch executor: random:tiny or a path")
    g.add_argument("--dtype", default=None, help="torch executor dtype")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="torch on CUDA without --num-gpu-blocks: share of device memory for weights + KV cache")

    g = p.add_argument_group("KV connector (prefill/decode disaggregation)")
    g.add_argument("--kv-connector", choices=("reference",), default=None,
                   help="enable the reference P/D KV connector (docs/engine.md)")
    g.add_argument("--kv-role", choices=("producer", "consumer", "both"), default="both",
                   help="producer pins finished do_remote_decode blocks; consumer notifies producers")
    g.add_argument("--kv-side-channel", default=None,
                   help="where a producer listens for consumer notices (default: tcp://127.0.0.1:0)")
    g.add_argument("--kv-lease-s", type=float, default=480.0, help="how long pinned blocks are kept")
    g.add_argument("--kv-engine-id", default=None, help="remote_engine_id to advertise (default: generated)")
    g.add_argument("--kv-producer", dest="kv_producers", action="append", default=[], metavar="ADDRESS",
                   help="a KV producer this consumer may connect to (repeatable): tcp://HOST:PORT, HOST:PORT, "
                        "NETWORK/PREFIX (any port), ipc:///DIR/ (any path inside), ipc:///PATH or inproc://NAME. "
                        "A request naming any other producer is refused (kv_producer_not_allowed) and nothing "
                        "is connected. Default: only this engine's own side channel (ECP-SEC-4, docs/engine.md)")

    g = p.add_argument_group("misbehaving on purpose")
    g.add_argument("--bug", action="append", default=[], metavar="NAME",
                   help="enable a bug knob (repeatable); see docs/engine.md")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (to stderr)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a flag's default unless it is empty or the help already explains it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == [] \
                or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


#: description, epilog and formatter of ``ecp engine`` and ``python -m ecp.reference.engine``
PARSER_TEXT = dict(
    description=f"Run reference engine cores (the vLLM {VLLM_RELEASE} protocol, or --vllm RELEASE's) as remote headless DP ranks.",
    epilog="Exit codes: 0 after a graceful stop (SIGTERM/SIGINT abort in-flight requests with ABORT outputs), "
           "1 when an engine failed to start or died, 2 for bad arguments. See docs/engine.md.",
    formatter_class=HelpFormatter)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "engine", help="run reference engine core(s) that join a frontend's handshake",
        **PARSER_TEXT)
    add_engine_arguments(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .main import run

    return run(args)
