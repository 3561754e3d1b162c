"""The README's test command, ``pip install -e ".[dev]" && pytest``, must work on a fresh machine:
the ``dev`` extra (with the core dependencies) has to provide every third-party module that the
tests and the packages they exercise import, torch's aside: the torch tests (tests/gpu, the torch
executor) need the ``gpu`` extra too, and the ``dev`` extra must not pull torch."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PROJECT = "engine-core-protocol"
#: source trees the tests read as data (parsed with ast, never imported): their imports name what
#: the mirrored project needs (vllm, pydantic), not what this one's tests need
DATA_TREES = (REPO / "tests" / "diff" / "fixtures" / "engine-tree",)


def _is_data(path: Path) -> bool:
    return any(path.is_relative_to(tree) for tree in DATA_TREES)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_REQ = re.compile(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?")


def _requirement_closure(pyproject: dict, extra: str) -> set[str]:
    """Distribution names installed by ``pip install ".[extra]"`` (self-references followed)."""
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    names: set[str] = set()
    reqs, todo, seen = list(project["dependencies"]), [extra], set()
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        for req in extras[e]:
            name, inner = _REQ.match(req).groups()
            if _norm(name) == PROJECT:
                todo += [x.strip() for x in (inner or "").split(",") if x.strip()]
            else:
                reqs.append(req)
    for req in reqs:
        names.add(_norm(_REQ.match(req).group(1)))
    return names


#: what needs the gpu extra beside dev: the torch tests and the torch executor they exercise
TORCH_TREES = (REPO / "tests" / "gpu", REPO / "reference" / "engine" / "torch_executor")
TORCH_FILES = (REPO / "tests" / "engine" / "test_engine_torch.py",)


def _needs_gpu_extra(path: Path) -> bool:
    return path in TORCH_FILES or any(path.is_relative_to(tree) for tree in TORCH_TREES)


def _third_party_imports(*folders: str, gpu: bool = False) -> dict[str, str]:
    """Top-level module -> first file importing it, for modules outside the stdlib and the repo."""
    # the script folders are packages of the repository (tests import them by module name)
    local = {"ecp", "tests", "benchmarks", "campaigns", "lab"}
    # tests' own helper modules are imported by their bare names
    for folder in ("tests", "spec", "reference", "conformance"):
        for p in (REPO / folder).rglob("*.py"):
            if not _is_data(p):
                local.add(p.stem)
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            if _is_data(path) or _needs_gpu_extra(path) != gpu:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            # an import in an except clause is a fallback (tomli on 3.10), not a requirement
            fallback = {id(n) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler)
                        for n in ast.walk(h)}
            for node in ast.walk(tree):
                if id(node) in fallback:
                    continue
                if isinstance(node, ast.Import):
                    mods = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module.split(".")[0]]
                else:
                    continue
                for mod in mods:
                    if mod not in sys.stdlib_module_names and mod not in local:
                        found.setdefault(mod, str(path.relative_to(REPO)))
    return found


def test_dev_extra_provides_every_module_the_tests_import():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    dev = _requirement_closure(pyproject, "dev")
    providers = importlib.metadata.packages_distributions()
    assert all((tree / "vllm" / "__init__.py").is_file() for tree in DATA_TREES)  # no stale exclusion
    assert "torch" not in dev, "the dev extra must not pull torch (a multi-GB download): that is the gpu extra's"
    with_gpu = dev | _requirement_closure(pyproject, "gpu")
    assert "torch" in with_gpu
    imports = _third_party_imports("tests", "reference", "conformance")
    gpu_imports = _third_party_imports("tests", "reference", gpu=True)
    assert {"tokenizers", "hypothesis", "zmq"} <= set(imports)  # the scan sees them
    assert "torch" not in imports, f"only the torch tests may import torch: {imports.get('torch')}"
    assert {"torch", "safetensors"} <= set(gpu_imports)
    missing = {}
    for (mod, where), provided in [*((i, dev) for i in imports.items()), *((i, with_gpu) for i in gpu_imports.items())]:
        dists = {_norm(d) for d in providers.get(mod, [])}
        if not dists & provided:
            missing[mod] = (where, sorted(dists) or "not installed")
    assert not missing, f"imported by the tests but not installed by the dev (or dev+gpu) extra: {missing}"
