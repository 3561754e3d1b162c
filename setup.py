"""Maps the top-level folders onto the ``ecp`` namespace (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

PARTS = ("spec", "conformance", "reference")

setup(
    packages=["ecp." + name for name in find_packages(include=[f"{p}*" for p in PARTS])],
    package_dir={f"ecp.{p}": p for p in PARTS},
    package_data={
        "ecp.spec": ["PROTOCOL.md", "sentences.txt", "schema/*.json", "vectors/*.json", "layouts/*.json"],
        "ecp.conformance": ["*.json", "schema/*.json"],
        "ecp.conformance.interop": ["schema/*.json", "templates/*.html", "templates/*.css", "templates/*.js"],
    },
)
