"""The distribution as a user gets it: an sdist built from the source tree holds the tests and the
docs, the wheel built from that sdist holds every file a doc or a command names, and installed into
a fresh virtual environment outside the tree it runs the README's first line (the engine-role
conformance run against ``ecp engine``) and ``ecp spec compat`` from another directory, printing
what the tree prints.

The environment is made with ``--system-site-packages`` and the wheel installed with
``--no-deps`` (the dependencies are the ones this test runs on; installing them again would only
cost time), and the test checks that ``ecp`` imports from that environment, not from the tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: what the sdist is built from: the build configuration and the folders it ships (what .gitignore
#: leaves out is not copied, so a developer's build/ or .venv never reaches the archive)
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md",
           "spec", "conformance", "reference", "tests", "docs", "benchmarks", "campaigns", "lab", ".ci")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".venv", ".hypothesis",
                                 ".pytest_cache", ".benchmarks")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _run(cmd: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _tracked_package_data() -> set[str]:
    """Every non-Python file of the three package folders, as its path inside the wheel."""
    out = set()
    for part in ("spec", "conformance", "reference"):
        for p in (REPO / part).rglob("*"):
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts:
                out.add(f"ecp/{p.relative_to(REPO).as_posix()}")
    return out


def _readme_line_1() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    first = block.splitlines()[0]
    install, _, command = first.partition(" && ")
    assert install.startswith("pip install") and command.startswith("ecp conformance engine -- "), first
    return command


def test_wheel_from_the_sdist_runs_the_readme_outside_the_tree(tmp_path):
    # the tree's own `ecp spec compat`, meanwhile (the editable install this test runs on)
    tree_compat = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "spec", "compat"], cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        src = tmp_path / "src"
        src.mkdir()
        for name in SOURCES:
            path = REPO / name
            if path.is_dir():
                shutil.copytree(path, src / name, ignore=IGNORED)
            else:
                shutil.copy2(path, src / name)
        build = "import sys, setuptools.build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"
        sdist_name = _run([sys.executable, "-c", build, "build_sdist", str(tmp_path / "dist")],
                          cwd=src).stdout.split()[-1]
        with tarfile.open(tmp_path / "dist" / sdist_name) as tar:
            members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
            # the sdist can run the tests and holds the docs they check
            assert {"tests/conftest.py", "tests/spec/test_distribution.py", "docs/conformance.md", ".ci/run",
                    "LICENSE", "CHANGELOG.md", "campaigns/explore_faults.py"} <= members
            tar.extractall(tmp_path / "unpacked", filter="data")
        [unpacked] = (tmp_path / "unpacked").iterdir()
        wheel_name = _run([sys.executable, "-c", build, "build_wheel", str(tmp_path / "dist")],
                          cwd=unpacked).stdout.split()[-1]
        wheel = tmp_path / "dist" / wheel_name
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
        missing = _tracked_package_data() - names
        assert not missing, f"package files left out of the wheel: {sorted(missing)}"
        assert any(n.endswith("/licenses/LICENSE") for n in names)

        venv = tmp_path / "venv"
        _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
        py = venv / "bin" / "python"
        _run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)])
        away = tmp_path / "elsewhere"
        away.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        probe = _run([str(py), "-c", (
            "import importlib.metadata as m, ecp.spec, ecp.conformance, ecp.reference\n"
            "from ecp.conformance import expected\n"
            "print(ecp.spec.__file__); print(ecp.conformance.__file__); print(ecp.reference.__file__)\n"
            "print(expected.resolve('vllm-0.33-engine'))\n"
            "md = m.metadata('engine-core-protocol')\n"
            "print(md['License-Expression']); print(len(md.get_all('Classifier'))); "
            "print(len(md.get_all('Project-URL')))")], cwd=away, env=env).stdout.splitlines()
        site = str(venv / "lib")
        assert all(line.startswith(site) for line in probe[:4]), probe  # from the venv, not the tree
        assert probe[3].endswith("expected/vllm-0.33-engine.txt")
        assert probe[4] == "Apache-2.0" and int(probe[5]) >= 5 and int(probe[6]) >= 1, probe
        assert shutil.which("ecp", path=env["PATH"]) == str(venv / "bin" / "ecp")

        version = _run(["ecp", "--version"], cwd=away, env=env).stdout
        assert version.startswith("ecp 0.") or version.startswith("ecp 1."), version
        assert "decode to their recorded values" in _run(["ecp", "vectors", "--check"], cwd=away, env=env).stdout

        # README line 1, as written, from another directory
        readme = _run(["bash", "-c", _readme_line_1()], cwd=away, env=env, timeout=150)
        last = readme.stdout.strip().splitlines()[-1]
        from ecp.conformance.registry import load_role

        # every case of the tree's catalogue ran and none failed (a race a loaded machine cannot provoke
        # may be UNSUPPORTED, as from the tree)
        m = re.search(r": ((?:\d+ [A-Z]+(?:, )?)+) in [0-9.]+s .*-> exit 0$", last)
        assert m, readme.stdout[-2000:]
        counts = {word: int(n) for n, word in re.findall(r"(\d+) ([A-Z]+)", m.group(1))}
        assert sum(counts.values()) == len(load_role("engine")) and counts.get("PASS", 0) >= len(load_role("engine")) - 3
        assert not {"FAIL", "CRASH", "TIMEOUT", "ERROR"} & set(counts), last

        wheel_compat = _run(["ecp", "spec", "compat"], cwd=away, env=env).stdout
    finally:
        tree_out, tree_err = tree_compat.communicate(timeout=120)
    assert tree_compat.returncode == 0, tree_err
    assert "Executed" in tree_out
    assert wheel_compat == tree_out
