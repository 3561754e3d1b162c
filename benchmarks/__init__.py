"""Benchmarks: each script measures ecp against a baseline run side by side in the same run (bare
msgspec, vLLM's own codec or frontend) and prints the ratio. Run one from the repository root as a
module, ``python -m benchmarks.NAME --help``; its short variant, where it has one, is a test. Not part
of the installed package."""
