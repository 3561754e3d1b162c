"""The torch executor: a Llama/Qwen2-family decoder over a paged KV cache (``pip install -e ".[gpu]"``).

Importing this package imports torch; the engine imports it only for
``--executor torch``.
"""

from .config import ModelConfig, ModelConfigError, parse_model_spec
from .executor import InvalidTokenError, TorchExecutor, resolve_device, resolve_dtype
from .paged_attention import BlockTableError

__all__ = [
    "BlockTableError", "InvalidTokenError", "ModelConfig", "ModelConfigError", "TorchExecutor",
    "parse_model_spec", "resolve_device", "resolve_dtype",
]
