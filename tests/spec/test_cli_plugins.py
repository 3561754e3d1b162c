"""The ``ecp`` CLI finds its subcommands through the ``ecp.commands`` entry-point group,
and ``ecp.spec`` imports nothing of the packages built on it."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import subprocess
import sys

import ecp.spec
from ecp.spec.cli import ENTRY_POINT_GROUP, build_parser, command_plugins

SPEC_DIR = pathlib.Path(ecp.spec.__file__).parent
# Every subcommand this distribution installs, with a word of its one-line help.
EXPECTED = {"summary": "summary", "decode": "decode", "schema": "JSON Schema", "vectors": "golden",
            "spec": "layouts", "engine": "engine", "serve": "OpenAI", "bench": "benchmarks",
            "conformance": "conformance", "monitor": "proxy"}


def _ep(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_every_part_registers_through_the_entry_point_group():
    names = {ep.name for ep in command_plugins()}
    assert {"spec", "engine", "frontend", "conformance", "monitor"} <= names


def test_help_lists_every_subcommand_with_its_help():
    proc = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    for command, word in EXPECTED.items():
        # argparse puts a long subcommand's help on the next line
        at = [i for i, line in enumerate(lines) if line.split()[:1] == [command]]
        assert at, f"{command} missing from ecp --help"
        text = " ".join(lines[at[0]:at[0] + 2])
        assert word in text, f"{command}'s help line lacks {word!r}: {text!r}"


def test_a_broken_plugin_is_a_clear_error_and_the_others_still_work(capsys):
    errors: list[str] = []
    plugins = [_ep("spec", "ecp.spec.commands:register"),
               _ep("missing", "ecp_no_such_plugin_module.commands:register"),
               _ep("raises", "ecp.spec.errors:this_attribute_does_not_exist"),
               _ep("notcallable", "ecp.spec.cli:ENTRY_POINT_GROUP")]
    parser = build_parser(plugins, errors)
    assert len(errors) == 3
    assert "'missing'" in errors[0] and "ModuleNotFoundError" in errors[0] and "ecp_no_such_plugin_module" in errors[0]
    assert "'raises'" in errors[1] and "AttributeError" in errors[1]
    assert "'notcallable'" in errors[2] and "not a register(subparsers) function" in errors[2]
    args = parser.parse_args(["summary"])   # the working plugin's subcommands are all there
    assert args.command == "summary" and callable(args.func)

    # printed to stderr, one line each, no traceback
    build_parser(plugins[1:2])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "unavailable" in err


def test_no_plugin_installed_says_how_to_fix_it():
    errors: list[str] = []
    build_parser([], errors)
    assert len(errors) == 1 and ENTRY_POINT_GROUP in errors[0] and "pip install" in errors[0]


BUILT_ON_SPEC = ("ecp.reference", "ecp.conformance")


def _imported_modules(path: pathlib.Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved), anywhere in it."""
    package = "ecp." + ".".join(path.relative_to(SPEC_DIR.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + ".__init__"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:-node.level] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            names.update(f"{mod}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(BUILT_ON_SPEC):
            names.add(node.value)   # importlib.import_module("ecp.reference....") and the like
    return names


def test_spec_sources_import_nothing_built_on_spec():
    offenders = []
    for path in sorted(SPEC_DIR.rglob("*.py")):
        for name in _imported_modules(path):
            # also a relative import reaching above ecp.spec (``from .. import reference``)
            if name.startswith("ecp.") and not name.startswith("ecp.spec") or name.startswith("ecp.__init__"):
                offenders.append(f"{path.relative_to(SPEC_DIR)}: {name}")
    assert offenders == []


BLOCKED_IMPORT = r"""
import importlib, importlib.abc, pkgutil, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("ecp.reference", "ecp.conformance")):
            raise ImportError(f"ecp.spec imported {name}")
        return None

sys.meta_path.insert(0, Block())
import ecp.spec, ecp.spec.cli
count = 0
for info in pkgutil.walk_packages(ecp.spec.__path__, "ecp.spec."):
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        if "ecp.spec imported" in str(exc):
            raise
        continue   # an optional extra not installed here: not this test's business
    count += 1
assert not [m for m in sys.modules if m.startswith(("ecp.reference", "ecp.conformance"))]
print(count)
"""


def test_importing_every_spec_module_loads_nothing_built_on_spec():
    proc = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 30   # it did walk the package
