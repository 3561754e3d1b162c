"""Maps the top-level folders onto the ``ecp`` namespace (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

PARTS = ("spec", "conformance", "reference")

setup(
    packages=["ecp." + name for name in find_packages(include=[f"{p}*" for p in PARTS])],
    package_dir={f"ecp.{p}": p for p in PARTS},
    # every file a doc or a command names is package data (tests/spec/test_distribution.py builds
    # the wheel and checks it against the tracked files); py.typed: the packages are annotated (PEP 561)
    package_data={
        "ecp.spec": ["py.typed", "PROTOCOL.md", "sentences.txt", "schema/*.json", "vectors/*.json",
                     "vectors/captures/*",
                     "layouts/*.json", "compat/*.json"],
        "ecp.conformance": ["py.typed", "*.json", "schema/*.json", "expected/*.txt", "templates/*.j2",
                            "templates/site/*"],
        "ecp.conformance.interop": ["schema/*.json"],
        "ecp.reference": ["py.typed"],
    },
)
