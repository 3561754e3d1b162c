"""The wire types of vLLM 0.33, the release ecp.spec's typed API is (``VLLM_RELEASE``,
spec/version.py): written by ``ecp spec types``, do not edit."""

from .vllm_0_33 import *  # noqa: F401,F403
from .vllm_0_33 import __all__  # noqa: F401
