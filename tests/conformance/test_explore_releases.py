"""``ecp conformance explore|replay --vllm RELEASE``: sessions drawn for a release, frames spoken and judged
as it, reproducers that record it. The reference peers of the oldest shipped release are explored as
that release without a finding, and as another one they are flagged."""

import json
import sys

import msgspec
import pytest

from ecp.conformance.explore.frontend_generate import draw_frontend
from ecp.conformance.explore.generate import draw, speaks
from ecp.conformance.explore.reproducer import UnknownRelease, read, release_of_file
from ecp.conformance.explore.run import ExploreOptions, explore
from ecp.spec import VLLM_RELEASE
from ecp.spec.profile import shipped_profile, shipped_releases

OLDEST = shipped_releases()[0]
ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process"]
SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}", "--dev-mode"]


def _lacks(profile):
    """What vLLM 0.33 has and ``profile``'s release lacks, of what the explorer sends."""
    ours = shipped_profile(VLLM_RELEASE)
    methods = {m for m in speaks(ours).utilities if m not in profile.utility_methods}
    fields = {f for f in ("abort_immediately", "current_wave") if not profile.has_field("EngineCoreRequest", f)}
    return methods, fields


def test_sessions_hold_only_what_their_release_has():
    """A release's sessions call only its utility methods and set only its request fields; the oldest
    shipped release lacks some of both (else this test shows nothing). vLLM 0.33's are drawn as ever."""
    old = shipped_profile(OLDEST)
    methods, fields = _lacks(old)
    assert methods and fields, f"vLLM {OLDEST} lacks nothing the explorer sends: pick another release"
    sessions = [draw(k, 2, profile=old) for k in range(150)]
    calls = [st for s in sessions for st in s.steps if st["op"] == "call"]
    assert calls and not {st["method"] for st in calls if not st.get("refused")} & methods
    assert all(st["method"] not in old.utility_methods or not old.utility_methods[st["method"]].accepts(
        len(st["args"])) for st in calls if st.get("refused"))
    adds = [st for s in sessions for st in s.steps if st["op"] == "add"]
    assert not any(st["abort_immediately"] for st in adds) or "abort_immediately" not in fields
    assert not any(st["wave"] for st in adds) or "current_wave" not in fields
    # what the release lacks is drawn and dropped: the sessions keep their length and their other steps
    ours = [draw(k, 2) for k in range(150)]
    assert [s.to_dict() for s in ours] == [draw(k, 2, profile=shipped_profile(VLLM_RELEASE)).to_dict()
                                           for k in range(150)]
    assert any(st["op"] == "call" and st["method"] in methods for s in ours for st in s.steps)
    # the frontend role: no utility route whose method the release lacks, no ERROR outputs without RequestError
    for k in range(40):
        s = draw_frontend(k, 2, profile=old)
        assert all(st["route"] in ("models", "health") or st["route"] in old.utility_methods
                   for st in s.steps if st["op"] == "route")
        if not old.has_field("EngineCoreOutput", "error"):
            assert s.topology.error_after is None


def _explore(tmp_path, command, vllm, role="engine", max_steps=10, engine_count=2, **kw):
    opts = ExploreOptions(command=command, role=role, engine_count=engine_count, budget_s=30, seed=11,
                          max_steps=max_steps, out_dir=tmp_path, quiet_window_s=0.1, step_timeout_s=3.0, vllm=vllm,
                          **kw)
    return explore(opts, say=lambda line: None)


def test_the_oldest_release_s_reference_engine_explored_as_that_release_shows_nothing(tmp_path):
    """Its ready payload lacks keys 0.33's has, its outputs are shorter, its wake_up answers nil: as
    vLLM 0.33 it would break a rule in its first message; as itself it breaks none."""
    report = _explore(tmp_path, [*ENGINE, "--vllm", OLDEST], OLDEST, max_sessions=2)
    assert report.sessions == 2 and report.messages > 0 and report.release == OLDEST
    assert report.findings == [], [(f.clause, f.message) for f in report.findings]


def test_an_engine_explored_as_another_release_is_flagged_and_its_reproducer_replays_as_that_release(
        tmp_path, run_ecp):
    """vLLM 0.33's reference engine explored as the oldest release breaks its rules at once; the
    reproducer records the release, its replay speaks it by default (the violation again), and
    ``--vllm`` replays it as the engine's own release (none)."""
    report = _explore(tmp_path, ENGINE, OLDEST, max_steps=3, engine_count=1, max_sessions=1, max_findings=1,
                      confirm_runs=0, shrink_runs=0)
    [found] = report.findings
    doc = read(found.path)
    assert (doc["vllm"], doc["release"]) == (OLDEST, OLDEST)
    assert release_of_file(doc, found.path).release == OLDEST
    code, out = run_ecp("conformance", "replay", str(found.path), "--step-timeout", "2s")
    assert out.startswith(f"judged as vLLM {OLDEST} (the file's: --vllm {OLDEST})"), out
    assert code == 1 and "no violation" not in out, out
    code, out = run_ecp("conformance", "replay", str(found.path), "--step-timeout", "2s", "--vllm", VLLM_RELEASE)
    assert out.startswith(f"judged as vLLM {VLLM_RELEASE} (--vllm {VLLM_RELEASE}; the file's is {OLDEST})"), out
    assert code == 0 and "no violation" in out, out


def test_a_reproducer_of_a_release_that_cannot_be_resolved_is_a_clear_error(tmp_path, capsys):
    from ecp.conformance.explore import reproducer
    from ecp.conformance.explore.session import Session, Topology
    from ecp.spec.cli import main

    session = Session(Topology(), [{"op": "add", "ref": 0, "max_tokens": 2, "prompt_len": 1}])
    path = reproducer.write(tmp_path / "r.json", role="engine", session=session, clause="ECP-OUT-1", message="-",
                            command=ENGINE, transport="ipc", engine_count=1, entries=[], recurrence={},
                            vllm=str(tmp_path / "gone" / "layout.json"), release="0.19")
    with pytest.raises(UnknownRelease, match="found with vLLM 0.19"):
        release_of_file(read(path), path)
    assert main(["conformance", "replay", str(path)]) == 2
    assert "pass --vllm RELEASE|PATH to replay it as another" in capsys.readouterr().err
    # a file written before reproducers recorded their release was found with vLLM 0.33
    doc = json.loads(path.read_text())
    del doc["vllm"], doc["release"]
    path.write_text(json.dumps(doc))
    assert release_of_file(read(path), path).release == "0.33"


@pytest.mark.parametrize("role", ["engine", "frontend"])
def test_a_release_that_names_none_is_a_usage_error(capsys, role):
    from ecp.spec.cli import main

    assert main(["conformance", "explore", role, "--vllm", "0.9", "--", "true"]) == 2
    assert "--vllm: no shipped layout named 'vllm-0.9'" in capsys.readouterr().err
    assert main(["conformance", "explore", role, "--vllm", "auto", "--", "true"]) == 2
    assert "--vllm auto is not taken here" in capsys.readouterr().err


def test_the_oldest_release_s_reference_frontend_explored_as_that_release_shows_nothing(tmp_path):
    """Scripted engines of vLLM 0.33 would see this frontend break ECP-REQ-1 in its first ADD (0.20's
    EngineCoreRequest is not 0.33's); engines of its own release see no rule broken."""
    report = _explore(tmp_path, [*SERVE, "--vllm", OLDEST], OLDEST, role="frontend", max_sessions=1)
    assert report.sessions == 1 and report.messages > 0 and report.release == OLDEST
    assert report.findings == [], [(f.clause, f.message) for f in report.findings]


def test_a_layout_file_is_a_release_named_as_it_states(tmp_path, monkeypatch):
    """``--vllm FILE`` of a release ecp does not ship (the newest layout less ``abort_immediately``, named
    0.99): its sessions set no ``abort_immediately``, its reproducers record the file by its absolute
    path, reports name the release the file states, and the reference engine run with the same file
    shows nothing."""
    from ecp.spec.layout.resolve import load_shipped, shipped_names

    data = msgspec.to_builtins(load_shipped(shipped_names()[-1]))
    data["name"], data["vllm_version"] = "vllm-0.99", "0.99.0"
    fields = [f for f in data["messages"]["EngineCoreRequest"]["fields"] if f["name"] != "abort_immediately"]
    for i, f in enumerate(fields):
        f["index"] = i
    data["messages"]["EngineCoreRequest"]["fields"] = fields
    (tmp_path / "next.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    opts = ExploreOptions(command=[], vllm="next.json")
    assert opts.profile.release == "0.99" and opts.recorded_vllm == str(tmp_path / "next.json")
    assert not any(st.get("abort_immediately") for k in range(60) for st in draw(k, 2, profile=opts.profile).steps)
    report = _explore(tmp_path, [*ENGINE, "--vllm", str(tmp_path / "next.json")], "next.json", max_sessions=1)
    assert report.sessions == 1 and report.release == "0.99"
    assert report.findings == [], [(f.clause, f.message) for f in report.findings]
