"""Adopting a release is one command: a rehearsal of ``ecp spec release add`` on a copy of the repository's
spec data (never the real tree), with a synthetic next release written from the extractor's fixture tree:
one optional field appended to ``EngineCoreRequest``, a new UTILITY method and a new ``FinishReason``
member, as vLLM's releases add them."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from ecp.spec.cli import main
from ecp.spec.diff.adopt import PACKAGE_ROOT, adopt, clause_spans, shipped
from ecp.spec.layout.resolve import shipped_names

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "engine-tree"

pytestmark = pytest.mark.timeout(120)


def _edit(path: Path, anchor: str, added: str) -> None:
    text = path.read_text()
    assert text.count(anchor) == 1, f"{path}: the anchor {anchor!r} must occur once"
    path.write_text(text.replace(anchor, anchor + added))


def _next_release(tmp: Path) -> Path:
    tree = tmp / "vllm-next"
    shutil.copytree(FIXTURE, tree)
    engine = tree / "vllm" / "v1" / "engine"
    _edit(engine / "requests.py", "    kv_hints: KvHintsEnvelope | None = None\n",
          "    ecp_next_hint: str | None = None\n")
    _edit(engine / "replies.py", "    REPETITION = 4\n", "    ECP_NEXT_REASON = 5\n")
    _edit(engine / "core.py", "    def is_sleeping(self) -> bool: ...\n",
          "\n    def ecp_next_method(self, level: int = 1) -> bool: ...\n")
    _edit(engine / "core_client.py", '        return await self.call_utility_async("is_sleeping")\n',
          '\n    async def next_method(self, level=1):\n'
          '        return await self.call_utility_async("ecp_next_method", level)\n')
    return tree


def _copy(tmp: Path) -> Path:
    root = tmp / "repo"
    shutil.copytree(PACKAGE_ROOT / "spec", root / "spec", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "docs").mkdir()
    shutil.copy(PACKAGE_ROOT / "docs" / "compatibility.md", root / "docs")
    return root


def _tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_a_next_release_is_adopted_by_one_command_and_only_generated_files_change(tmp_path):
    root = _copy(tmp_path)
    newest = shipped_names()[-1]
    before = _tree_digest(root)
    result = adopt(str(_next_release(tmp_path)), root, version="9.1.0")
    after = _tree_digest(root)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == result["changed"]
    assert "spec/layouts/vllm-9.1.json" in changed and "docs/compatibility.md" in changed
    assert all(p.startswith(("spec/layouts/", "spec/schema/", "spec/wiretypes/"))
               or p in ("spec/PROTOCOL.md", "docs/compatibility.md") for p in changed), changed
    # the release's wire types are generated and committed with its layout: the new field is a field
    module = (root / "spec" / "wiretypes" / "vllm_9_1.py").read_text()
    assert "spec/wiretypes/vllm_9_1.py" in changed
    assert "    ecp_next_hint: str | None = None\n" in module and "    ECP_NEXT_REASON = 5\n" in module
    # what changed against the release before it, by the diff's rules
    assert result["name"] == "vllm-9.1" and result["previous"] == newest
    for said in ("EngineCoreRequest.ecp_next_hint: new optional field", "ecp_next_method", "ECP_NEXT_REASON"):
        assert said in result["findings"], result["findings"]
    # the release-bound clauses the newest release had now reach the next one too
    layouts = shipped(root)
    assert list(layouts)[-1] == "vllm-9.1"
    assert result["spans"] == {c: (clause_spans(shipped(PACKAGE_ROOT))[c], span)
                               for c, span in clause_spans(layouts).items()
                               if span != clause_spans(shipped(PACKAGE_ROOT))[c]}
    assert result["spans"], "ECP-OUT-5 (0.33 only) reaches the next release"
    protocol = (root / "spec" / "PROTOCOL.md").read_text()
    assert "9.1" in protocol and "9.1" not in (PACKAGE_ROOT / "spec" / "PROTOCOL.md").read_text()
    # the real tree is untouched
    assert "vllm-9.1" not in shipped_names()


def test_the_command_refuses_what_is_not_a_repository_or_a_vllm_tree(tmp_path, capsys):
    assert main(["spec", "release", "add", "--from-vllm", str(FIXTURE), "--root", str(tmp_path)]) == 2
    assert "holds no spec/layouts/" in capsys.readouterr().err
    root = _copy(tmp_path)
    assert main(["spec", "release", "add", "--from-vllm", str(tmp_path / "nothing"), "--root", str(root)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_release_list_names_every_shipped_release(capsys):
    assert main(["spec", "release", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [n[len("vllm-"):] for n in shipped_names()]
