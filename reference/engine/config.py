"""Engine configuration: every knob of ``ecp engine`` as one dataclass.

The CLI (:mod:`.commands`), the launcher (:func:`ecp.reference.engine.launch`)
and the tests build an :class:`EngineConfig`; the core reads it and never
parses arguments itself. :func:`config_to_argv` turns a config back into
``ecp engine`` flags so the launcher can start engines as OS processes.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .faults import FAULTS
from ecp.spec import VLLM_RELEASE

if TYPE_CHECKING:
    from ecp.spec.profile import Profile

#: Bug knobs accepted by ``--bug``: the faults of :mod:`.faults` (see docs/engine.md for each)
BUGS: dict[str, str] = {name: f"{f.clause}: {f.does}" for name, f in FAULTS.items()}

EXECUTORS = ("synthetic", "torch")
KV_ROLES = ("producer", "consumer", "both")


@dataclass
class EngineConfig:
    """What one engine core (one DP rank) runs with. Defaults mirror vLLM where it has them."""

    max_model_len: int = 4096
    block_size: int = 16
    num_gpu_blocks: int | None = None  # None: the executor's memory model, else 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    seed: int = 0
    scheduling_policy: str = "priority"  # "fcfs" ignores ADD.priority
    # -- executor ---------------------------------------------------------
    executor: str = "synthetic"
    vocab_size: int = 32000
    output_token_chunk_size: int = 1
    step_time_ms: float = 0.0
    prefill_token_cost_us: float = 0.0
    decode_token_cost_us: float = 0.0
    eos_every: int = 0  # synthetic: emit EOS at every Nth generated token (0 = never)
    eos_token_id: int = 2  # synthetic: EOS emitted when the request names none
    device: str = "auto"
    model: str = "random:tiny"
    dtype: str | None = None
    gpu_memory_utilization: float = 0.9
    # -- KV connector (P/D disaggregation) ----------------------------------
    kv_connector: str | None = None  # "reference"
    kv_role: str = "both"
    kv_side_channel: str | None = None
    kv_lease_s: float = 480.0
    kv_engine_id: str | None = None
    #: ECP-SEC-4: producers a consumer may notify (--kv-producer); this engine's own side channel
    #: (--kv-side-channel, and where it bound) is always allowed
    kv_producers: list[str] = field(default_factory=list)
    # -- protocol surface -------------------------------------------------
    #: the vLLM release spoken on the wire (``--vllm RELEASE|PATH``): its codec, ready payload and UTILITY table
    vllm: str = VLLM_RELEASE
    disable_log_stats: bool = False
    local: bool = False  # HELLO local=true, headless=false
    data_parallel_size: int | None = None  # None: engine_start_index + engine_count
    max_loras: int = 0
    handshake_timeout_s: float = 300.0
    coordinator_timeout_s: float = 300.0
    bugs: list[str] = field(default_factory=list)
    log_level: str = "INFO"

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first inconsistent setting."""
        if self.max_model_len < 1 or self.block_size < 1 or self.max_num_seqs < 1:
            raise ValueError("max_model_len, block_size and max_num_seqs must be positive")
        if self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be positive")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError("without chunked prefill max_num_batched_tokens must be >= max_model_len")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 1:
            raise ValueError("num_gpu_blocks must be positive")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}")
        from .synthetic import RESERVED_TOKEN_IDS

        if self.vocab_size <= RESERVED_TOKEN_IDS:
            raise ValueError(f"vocab_size must be > {RESERVED_TOKEN_IDS} (ids below it are reserved)")
        if self.output_token_chunk_size < 1:
            raise ValueError("output_token_chunk_size must be >= 1")
        if self.kv_connector not in (None, "reference"):
            raise ValueError("kv_connector must be 'reference'")
        if self.kv_role not in KV_ROLES:
            raise ValueError(f"kv_role must be one of {KV_ROLES}")
        from .kv_connector import ProducerAllowList

        ProducerAllowList(self.kv_producers)  # raises ValueError naming a malformed entry
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError("scheduling_policy must be fcfs or priority")
        from ecp.spec.layout.model import LayoutError

        try:
            self.profile()
        except LayoutError as exc:
            raise ValueError(f"--vllm: {exc}") from None
        for bug in self.bugs:
            if bug not in BUGS:
                raise ValueError(f"unknown --bug {bug!r}; known: {', '.join(BUGS)}")

    def profile(self) -> "Profile":
        """The release profile of :attr:`vllm`, built once per process (a layout file or a vLLM tree
        is read once, not per rank)."""
        return _profile(self.vllm, os.getcwd())

    def replace(self, **changes: Any) -> "EngineConfig":
        return dataclasses.replace(self, **changes)


def config_from_options(**options: Any) -> EngineConfig:
    """Build a config from keyword options (``bug=``/``bugs=`` both accepted)."""
    bugs = list(options.pop("bugs", []) or [])
    bug = options.pop("bug", None)
    if isinstance(bug, str):
        bugs.append(bug)
    elif bug:
        bugs.extend(bug)
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    unknown = set(options) - names
    if unknown:
        raise TypeError(f"unknown engine option(s): {', '.join(sorted(unknown))}")
    config = EngineConfig(**options, bugs=bugs)
    config.validate()
    return config


def config_to_argv(config: EngineConfig) -> list[str]:
    """``ecp engine`` flags that reproduce ``config`` (defaults omitted)."""
    argv: list[str] = []
    default = EngineConfig()
    for f in dataclasses.fields(EngineConfig):
        value = getattr(config, f.name)
        if f.name == "bugs":
            for bug in value:
                argv += ["--bug", bug]
            continue
        if f.name == "kv_producers":
            for entry in value:
                argv += ["--kv-producer", entry]
            continue
        if value == getattr(default, f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            if f.name in ("enable_chunked_prefill", "enable_prefix_caching"):
                argv.append(("--" if value else "--no-") + f.name.replace("_", "-"))
            elif value:
                argv.append(flag)
        elif value is not None:
            argv += [flag, str(value)]
    return argv


@lru_cache(maxsize=8)
def _profile(reference: str, cwd: str) -> "Profile":
    from pathlib import Path

    from ecp.spec.profile import resolve_profile

    return resolve_profile(reference, Path(cwd))
