"""The interop lab: scripts that run real vLLM peers (``../shared/peers/vllm/``) against ecp and
against each other (the interop matrix, cross-release pairs, vLLM's known issues, the forked
launchers that make a vLLM start affordable on a small machine). Run one from the repository root as
a module, ``python -m lab.NAME --help``; ``vllm_prefork.py`` and ``vllm_forked_cli.py`` run under
the peer's own Python, by path. Never part of CI, nor of the installed package."""
