"""The vLLM release ecp.spec's typed messages are: the one place product code names it.

Everything else takes it from here (``from ecp.spec import VLLM_RELEASE``) or from the release under test
(``--vllm``: :class:`ecp.spec.profile.Profile`). ``ecp spec release add`` adopts a release's layout;
moving these two lines is what moving the typed messages to it means.
"""

#: the full version (``vllm_version`` in a ready payload)
VLLM_VERSION = "0.33.0"
#: its short name, as ``--vllm`` and reports write it
VLLM_RELEASE = ".".join(VLLM_VERSION.split(".")[:2])
