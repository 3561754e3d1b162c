"""``ecp spec layout --from-vllm``: static extraction from a vLLM tree, without vLLM installed.

``fixtures/engine-tree/`` is a tree written for these tests, not vLLM's source: a ``vllm``
package (the name the extractor reads) in a module layout of its own, declaring the wire types of
vLLM 0.33 (names, fields, types, defaults and order, enum members, the HELLO/READY dict
literals, the request-type dispatch, the UTILITY call sites and methods, the tuple sends) in the
syntactic forms vLLM's releases use: ``msgspec.Struct`` with ``array_like``/``omit_defaults`` and
inherited options, dataclasses, pydantic dataclasses and a ``@config`` decorator, ``NamedTuple``,
int, ``auto()``, str and bytes enums, ``TYPE_CHECKING`` and ``try``/``except ImportError``
imports, relative imports and re-exports, forward references, ``Optional``/``Union``/``|``
spellings, nested ``Literal`` aliases, ``TypeAlias``, ``NewType``, ``TypeAliasType``,
``ClassVar``, inherited fields, default factories. Extracting it must give the checked-in
``vllm-0.33.json``, generated from the real wheel, warnings included; only the sha256, the line
numbers and the file names differ (:data:`AS_IN_WHEEL` names, for each module of the tree, the
wheel's module that holds the same declarations). The real wheel is checked by
``lab/vllm_extractor_check.py``, outside the suite.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from ecp.spec.cli import main
from ecp.spec.layout.model import decode_layout, encode_layout
from ecp.spec.layout.vllm import CODES, SourceError, extract

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "engine-tree"
SHIPPED = ROOT / "spec" / "layouts" / "vllm-0.33.json"
WHEEL = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
#: each module of the fixture -> the module of the 0.33.0 wheel holding the same declarations
AS_IN_WHEEL = {
    "vllm/adapters.py": "vllm/lora/request.py",
    "vllm/errors.py": "vllm/outputs.py",
    "vllm/media.py": "vllm/multimodal/inputs.py",
    "vllm/params/__init__.py": "vllm/sampling_params.py",
    "vllm/params/pooling.py": "vllm/pooling_params.py",
    "vllm/params/sampling.py": "vllm/sampling_params.py",
    "vllm/params/tasks.py": "vllm/tasks.py",
    "vllm/settings/events.py": "vllm/config/kv_events.py",
    "vllm/settings/schema.py": "vllm/config/utils.py",
    "vllm/v1/codec.py": "vllm/v1/serial_utils.py",
    "vllm/v1/engine/__init__.py": "vllm/v1/engine/__init__.py",
    "vllm/v1/engine/coordinator.py": "vllm/v1/engine/coordinator.py",
    "vllm/v1/engine/core.py": "vllm/v1/engine/core.py",
    "vllm/v1/engine/core_client.py": "vllm/v1/engine/core_client.py",
    "vllm/v1/engine/replies.py": "vllm/v1/engine/__init__.py",
    "vllm/v1/engine/requests.py": "vllm/v1/engine/__init__.py",
    "vllm/v1/kv_hints.py": "vllm/v1/kv_hints/protocol.py",
    "vllm/v1/recovery.py": "vllm/v1/fault_tolerance/engine_core_sentinel.py",
    "vllm/v1/scaling.py": "vllm/distributed/elastic_ep/external_elastic_ep.py",
    "vllm/v1/startup.py": "vllm/v1/engine/utils.py",
    "vllm/v1/stats/__init__.py": "vllm/v1/metrics/stats.py",
    "vllm/v1/stats/cudagraph.py": "vllm/compilation/cuda_graph.py",
    "vllm/v1/stats/drafting.py": "vllm/v1/spec_decode/metrics.py",
    "vllm/v1/stats/hit_source.py": "vllm/v1/metrics/cache_hit_source.py",
    "vllm/v1/stats/perf.py": "vllm/v1/metrics/perf.py",
    "vllm/v1/stats/scheduler.py": "vllm/v1/metrics/stats.py",
    "vllm/v1/token_arrays.py": "vllm/v1/outputs.py",
}


def _dotted(path: str) -> str:
    return path[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def _normalised(doc: dict, as_in_wheel: dict[str, str] | None = None) -> dict:
    """The layout without its sha256 and line numbers; with ``as_in_wheel``, each file (and
    module, in warnings) of the fixture renamed to the wheel's."""
    files = as_in_wheel or {}
    modules = {_dotted(k): _dotted(v) for k, v in files.items()}

    def path(p: str) -> str:
        return files.get(p, p)

    def text(s: str) -> str:  # a class's qualified name in a warning: vllm.pkg.module.Class
        return re.sub(r"\bvllm(?:\.\w+)*(?=\.[A-Z])", lambda m: modules.get(m.group(0), m.group(0)), s)

    doc = json.loads(json.dumps(doc))
    for msg in doc["messages"].values():
        msg["defined_in"] = path(msg["defined_in"])
        if "note" in msg:
            msg["note"] = re.sub(r"vllm/[\w/]+\.py", lambda m: path(m.group(0)), msg["note"])
    prov = doc["provenance"]
    prov.pop("sha256", None)
    prov["warnings"] = [f"{path(w.split(':', 1)[0])}: {text(w.split(': ', 1)[1])}" for w in prov["warnings"]]
    prov["locations"] = {k: path(v.rpartition(":")[0]) for k, v in prov.get("locations", {}).items()}
    return doc


def _wheel_of(tree: Path, dest: Path, name: str = WHEEL) -> Path:
    path = dest / name
    with zipfile.ZipFile(path, "w") as zf:
        for file in sorted(tree.rglob("*.py")):
            zf.write(file, file.relative_to(tree).as_posix())
        zf.writestr("vllm-0.33.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n")
    return path


def test_the_fixture_reproduces_the_checked_in_0_33_layout(tmp_path):
    result = extract(_wheel_of(FIXTURE, tmp_path))
    shipped = json.loads(SHIPPED.read_bytes())
    got, want = _normalised(json.loads(encode_layout(result.layout)), AS_IN_WHEEL), _normalised(shipped)
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # the same order too: messages, enums, UTILITY methods
    # every module of the fixture is read (nothing in it the extractor skips) and has its wheel module
    assert result.files == sorted(AS_IN_WHEEL)
    assert sorted(p.relative_to(FIXTURE).as_posix() for p in FIXTURE.rglob("*.py")) == sorted(
        [*AS_IN_WHEEL, "vllm/__init__.py"])
    assert shipped["provenance"]["wheel"] == WHEEL and len(shipped["provenance"]["sha256"]) == 64


def _expected_on_line(subject: str) -> str:
    """What the source line a location names must show: the member, field, method or class."""
    special = {"Hello": '"HELLO"', "Ready": '"READY"', "UtilityRequest": "= request", "StartDPWave": "= request",
               "request types": "class EngineCoreRequestType", "utility handle_fault_tolerance": "RECOVERY_CALL"}
    if subject in special:
        return special[subject]
    if subject.startswith("request type 0x"):
        return "b\"\\x" + subject[-2:] + '"'
    if subject.startswith("enum ") and "." not in subject:
        return "class " + subject[len("enum "):] + "("
    name = subject.rsplit(".", 1)[-1].rsplit(" ", 1)[-1]
    return f"def {name}(" if subject.startswith("utility ") else name if "." in subject else f"class {name}"


def test_every_location_names_the_line_of_its_subject():
    locations = extract(FIXTURE, version="0.33.0").layout.provenance.locations
    assert len(locations) == len(json.loads(SHIPPED.read_bytes())["provenance"]["locations"])
    for subject, where in locations.items():
        file, _, line = where.rpartition(":")
        source = (FIXTURE / file).read_text().splitlines()[int(line) - 1]
        assert _expected_on_line(subject) in source, (subject, where, source)


def test_a_checkout_an_unpacked_wheel_and_a_wheel_give_the_same_layout(tmp_path):
    from_dir = extract(FIXTURE, version="0.33.0").layout
    from_whl = extract(_wheel_of(FIXTURE, tmp_path)).layout
    unpacked = tmp_path / "site-packages"
    shutil.copytree(FIXTURE, unpacked)
    (unpacked / "vllm-0.33.0.dist-info").mkdir()
    (unpacked / "vllm-0.33.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n")
    from_site = extract(unpacked).layout
    for other in (from_whl, from_site):
        assert from_dir.messages == other.messages and from_dir.utility_methods == other.utility_methods
    assert [x.provenance.tree for x in (from_dir, from_whl, from_site)] == ["checkout", "wheel", "unpacked"]
    assert from_site.vllm_version == "0.33.0"  # from the METADATA, not from the caller
    assert from_dir.provenance.sha256 is None and from_whl.provenance.sha256 is not None


def test_the_extracted_wire_facts():
    layout = decode_layout(SHIPPED.read_bytes(), "vllm-0.33.json")
    req = layout.messages["EngineCoreRequest"]
    assert (req.encoding, req.frame, len(req.fields), req.required_count) == ("array", "ADD", 22, 9)
    assert [f.name for f in req.fields][19:] == ["abort_immediately", "session_id", "kv_hints"]
    out = layout.messages["EngineCoreOutput"]
    assert len(out.fields) == 19 and out.field("finish_reason").type == "enum:FinishReason | nil"
    assert out.field("routed_experts").type == "tensor | nil"  # np.ndarray
    assert layout.messages["SamplingParams"].omit_defaults
    assert layout.messages["SamplingParams"].field("output_kind").default == 0  # RequestOutputKind.CUMULATIVE
    assert layout.messages["SamplingParams"].field("_all_stop_token_ids").default == []  # default_factory=set
    assert layout.messages["Hello"].tag == ["status", "HELLO"]
    assert [f.name for f in layout.messages["Ready"].fields if not f.required] == [
        "parallel_config_hash", "coord_store_port", "elastic_ep_max_dp_size", "num_redundant_experts"]
    assert layout.enums["FinishReason"].values == {"STOP": 0, "LENGTH": 1, "ABORT": 2, "ERROR": 3, "REPETITION": 4}
    assert [(t.byte, t.name, t.on_wire) for t in layout.request_types] == [
        ("00", "ADD", True), ("01", "ABORT", True), ("02", "START_DP_WAVE", True), ("03", "UTILITY", True),
        ("04", "EXECUTOR_FAILED", False), ("05", "WAKEUP", False)]
    profile = layout.utility_methods["profile"]
    assert [p.name for p in profile.params] == ["is_start", "profile_prefix", "delay_iterations",
                                                "max_iterations", "profiler_kwargs"]
    assert layout.utility_methods["get_supported_tasks"].result == "array[str]"  # nested Literal aliases
    assert layout.utility_methods["is_sleeping"].result == "bool"
    # nested types take the direction of the payload that carries them
    assert layout.messages["LoRARequest"].direction == "frontend->engine"
    assert layout.messages["PrefillStats"].direction == "engine->frontend"


def test_every_warning_names_a_file_a_line_and_a_known_code():
    layout = decode_layout(SHIPPED.read_bytes(), "vllm-0.33.json")
    assert layout.provenance.warnings
    for w in layout.provenance.warnings:
        m = re.match(r"^(vllm/[\w/]+\.py):(\d+): ([a-z-]+): ", w)
        assert m and m.group(3) in CODES, w


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in {"vllm/__init__.py": "", **files}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_unresolvable_constructs_are_typed_warnings_not_guesses(tmp_path):
    root = _tree(tmp_path, {"vllm/v1/engine/__init__.py": (
        "import msgspec\n"
        "from thirdparty import Blob\n"
        "class Opaque:\n    pass\n"
        "def make():\n    return 3\n"
        "class EngineCoreRequest(msgspec.Struct, array_like=True):\n"
        "    request_id: str\n"
        "    blob: Blob | None = None\n"
        "    opaque: Opaque | None = None\n"
        "    count: int = make()\n"
        "    later: 'Missing' = None\n")})
    result = extract(root, version="9.9.0")
    req = result.layout.messages["EngineCoreRequest"]
    assert [(f.name, f.type) for f in req.fields] == [
        ("request_id", "str"), ("blob", "any"), ("opaque", "any"), ("count", "int"), ("later", "any")]
    assert req.field("count").default is not None and not req.field("count").required
    assert "default" not in json.loads(encode_layout(result.layout))["messages"]["EngineCoreRequest"]["fields"][3]
    found = {(w.code, w.line) for w in result.warnings if w.file == "vllm/v1/engine/__init__.py"}
    assert {("external-type", 9), ("unsupported-class", 10), ("default", 11), ("unresolved-type", 12)} <= found
    missing = [w.message for w in result.warnings if w.code == "missing"]
    assert any("EngineCoreOutputs" in m for m in missing) and any("HELLO" in m for m in missing)
    assert result.layout.name == "vllm-9.9"


def test_relative_imports_and_annotated_aliases_resolve(tmp_path):
    # each form on its own, beside the fixture's use of them among the wire types
    root = _tree(tmp_path, {
        "vllm/v1/engine/__init__.py": (
            "import msgspec\n"
            "from .kinds import Kind\n"  # level 1 from a package
            "from ..wire import Ids\n"  # level 2 from a package
            "class EngineCoreRequest(msgspec.Struct, array_like=True):\n"
            "    request_id: str\n    kind: Kind\n    ids: Ids\n"),
        "vllm/v1/engine/kinds.py": "from typing import Literal, TypeAlias\nKind: TypeAlias = Literal['a', 'b']\n",
        "vllm/v1/wire.py": "from typing import TypeAlias\nfrom .engine.kinds import Kind as K\nIds: TypeAlias = list[K]\n",
    })
    result = extract(root, version="9.9.0")
    req = result.layout.messages["EngineCoreRequest"]
    assert [(f.name, f.type) for f in req.fields] == [("request_id", "str"), ("kind", "str"), ("ids", "array[str]")]
    assert [w for w in result.warnings if w.code != "missing"] == []


def test_forms_the_0_33_tree_cannot_carry_and_the_warnings_they_give(tmp_path):
    """Shapes a release may use that would change the 0.33 layout (so the fixture tree leaves them
    out), and one construct for each warning code the 0.33 wheel does not trigger."""
    root = _tree(tmp_path, {
        "vllm/v1/engine/__init__.py": (
            "import enum\nfrom typing import NotRequired, TypedDict\nimport msgspec\n"
            "from vllm.v1.other import Opts as OtherOpts\n"
            "class Mode(enum.StrEnum):\n    A = 'a'\n"
            "class Flags(enum.IntFlag):\n    X = 1\n    Y = 2\n"
            "class Extra(TypedDict, total=False):\n    a: int\n    b: NotRequired[str]\n"
            "class Opts(TypedDict):\n    must: int\n    maybe: NotRequired[str]\n"
            "class Tagged(msgspec.Struct, tag=True):\n    x: int\n"
            "Loop = list['Loop']\n"
            "class Bad(enum.IntEnum):\n    A = 1\n    B = compute()\n"
            "class EngineCoreRequestType(enum.Enum):\n    ADD = b'\\x00'\n    WIDE = b'\\x00\\x01'\n"
            "class EngineCoreRequest(msgspec.Struct, array_like=True):\n"
            "    mode: Mode\n    flags: Flags\n    extra: Extra\n    opts: Opts\n"
            "    other: OtherOpts\n    tagged: Tagged\n    loop: Loop\n    bad: Bad\n"),
        "vllm/v1/other.py": "from typing import TypedDict\nclass Opts(TypedDict):\n    z: int\n",
        "vllm/v1/engine/core.py": (
            "class EngineCoreProc:\n    def handle(self, request_type, request):\n"
            "        if request_type == EngineCoreRequestType.UTILITY:\n"
            "            client_idx, call_id, method_name, args = request\n"),
        "vllm/v1/engine/core_client.py": "class Link:\n    def go(self):\n        self.call_utility(pick_method())\n",
    })
    result = extract(root, version="9.9.0")
    layout = result.layout
    types = {f.name: f.type for f in layout.messages["EngineCoreRequest"].fields}
    assert {k: v for k, v in types.items() if k != "loop"} == {
        "mode": "str", "flags": "enum:Flags", "extra": "struct:Extra", "opts": "struct:Opts",
        "other": "struct:Opts", "tagged": "struct:Tagged", "bad": "enum:Bad"}
    assert types["loop"].startswith("array[") and types["loop"].endswith("[any" + "]" * types["loop"].count("["))
    assert [(f.name, f.required) for f in layout.messages["Extra"].fields] == [("a", False), ("b", False)]
    assert [(f.name, f.required) for f in layout.messages["Opts"].fields] == [("must", True), ("maybe", False)]
    assert layout.enums["Flags"].values == {"X": 1, "Y": 2} and layout.enums["Bad"].values == {"A": 1}
    assert [t.name for t in layout.request_types] == ["ADD"]
    assert [f.type for f in layout.messages["UtilityRequest"].fields] == ["any"] * 4
    found = {(w.code, w.file.rsplit("/", 1)[-1], w.line) for w in result.warnings if w.code != "missing"}
    assert found == {("name-clash", "__init__.py", 30), ("recursive-type", "__init__.py", 18),
                     ("enum-value", "__init__.py", 21), ("struct-option", "__init__.py", 16),
                     ("tuple-payload", "core.py", 4), ("request-type", "__init__.py", 24),
                     ("utility-dynamic", "core_client.py", 3)}


def test_a_utility_result_comes_from_the_method_s_own_returns(tmp_path):
    """A helper defined in the method's body returns for itself: the method still returns nothing."""
    root = _tree(tmp_path, {
        "vllm/v1/engine/core.py": (
            "class EngineCore:\n"
            "    def warm(self):\n"
            "        def helper():\n            return 1\n"
            "        self.run(helper())\n"
            "    def count(self):\n        return 3\n"),
        "vllm/v1/engine/core_client.py": (
            "class Link:\n"
            "    def warm(self):\n        self.call_utility('warm')\n"
            "    def count(self):\n        return self.call_utility('count')\n")})
    result = extract(root, version="9.9.0")
    assert {n: m.result for n, m in result.layout.utility_methods.items()} == {"warm": "nil", "count": "any"}
    assert [(w.code, w.line) for w in result.warnings if w.code.startswith("utility")] == [("utility-result", 6)]


@pytest.mark.parametrize("make", [
    lambda p: p / "nowhere",
    lambda p: (p / "x.txt").write_text("x") and p / "x.txt",
    lambda p: (p / "bad.whl").write_bytes(b"not a zip") and p / "bad.whl",
    lambda p: p,  # a directory without vllm/
])
def test_paths_that_are_not_vllm_trees_are_refused(tmp_path, make):
    with pytest.raises(SourceError):
        extract(make(tmp_path))


def test_the_command_writes_checks_and_reports_warnings(tmp_path, capsys):
    out = tmp_path / "layout.json"
    assert main(["spec", "layout", "--from-vllm", str(FIXTURE), "--vllm-version", "0.33.0", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: vllm/v1/engine/core.py:" in err and "value-type" in err
    assert main(["spec", "layout", "--from-vllm", str(FIXTURE), "--vllm-version", "0.33.0", "--out", str(out),
                 "--check"]) == 0
    assert main(["spec", "layout", "--from-vllm", str(FIXTURE), "--vllm-version", "0.32.0", "--out", str(out),
                 "--check"]) == 1
    assert main(["spec", "layout", "--from-vllm", str(FIXTURE), "--vllm-version", "0.33.0", "--out", str(out),
                 "--strict"]) == 1
    assert main(["spec", "layout", "--from-vllm", str(tmp_path / "nowhere")]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("where, text", [
    ("vllm/_version.py", "version: str\n__version__: str\n__version__ = version = '0.34.0'\n"
                         "__version_tuple__ = version_tuple = (0, 34, 0)\n"),  # setuptools-scm, vcs-versioning
    ("vllm/_version.py", '__version__ = "0.34.0"\n'),
    ("PKG-INFO", "Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n"),        # an unpacked sdist
])
def test_a_tree_is_named_by_the_version_it_states(tmp_path, where, text):
    """A built checkout or an unpacked sdist states its version: the layout carries it as its name."""
    tree = tmp_path / "vllm-src"
    shutil.copytree(FIXTURE, tree)
    (tree / "vllm" / "_version.py").unlink(missing_ok=True)
    (tree / where).write_text(text)
    layout = extract(tree).layout
    assert layout.name == "vllm-0.34" and layout.vllm_version == "0.34.0", (layout.name, layout.vllm_version)


def test_a_checkout_without_a_version_is_named_by_its_commit(tmp_path):
    """Never ``vllm-unknown``: a git checkout that records no version carries its commit as its name."""
    import subprocess

    tree = tmp_path / "vllm-main"
    shutil.copytree(FIXTURE, tree)
    (tree / "vllm" / "_version.py").unlink(missing_ok=True)
    git = ["git", "-C", str(tree), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=30)
    subprocess.run([*git, "add", "-A"], check=True, timeout=30)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True, timeout=30)
    commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], check=True, timeout=30,
                            capture_output=True, text=True).stdout.strip()
    layout = extract(tree).layout
    assert layout.name == f"vllm-{commit}" and f"commit {commit}" in layout.source
    from ecp.spec.profile import build_profile

    assert build_profile(layout).label == f"vLLM {commit}"


def test_a_wheel_is_read_once_for_every_process_of_a_run(tmp_path, monkeypatch):
    """``--vllm WHEEL``: the layout read from a wheel is kept in the cache and read from there by the next
    process (every peer of a run resolves it); the cached layout is the one the wheel gives."""
    from ecp.spec.layout.model import decode_layout
    from ecp.spec.layout import vllm as extractor
    from ecp.spec.profile import resolve as R

    monkeypatch.setenv("ECP_CACHE_DIR", str(tmp_path / "cache"))
    wheel = _wheel_of(FIXTURE, tmp_path)
    first = R.resolve_profile(str(wheel))
    [cached] = (tmp_path / "cache" / "layouts").iterdir()
    assert decode_layout(cached.read_bytes(), "cached") == first.layout and first.release == "0.33"
    R._from_path.cache_clear()  # as a new process

    def no_extraction(*_a, **_k):
        raise AssertionError("the wheel was read again")

    monkeypatch.setattr(extractor, "extract", no_extraction)
    assert R.resolve_profile(str(wheel)).layout == first.layout
    R._from_path.cache_clear()
