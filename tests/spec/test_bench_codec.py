"""The codec benchmark runs end to end (a tiny variant: no timing is asserted here)."""

from __future__ import annotations

from ecp.spec.profile import shipped_releases

from benchmarks import bench_codec


def test_every_case_round_trips_and_the_exit_code_follows_the_bound(capsys):
    bench = bench_codec
    cases = bench.cases()
    names = {c["name"] for c in cases}
    assert {"ADD 512-token prompt", "outputs step + stats, 64 streams",
            "outputs step + stats, 256 streams"} <= names
    for c in cases:  # ecp and the bare decoder agree on every benchmarked frame
        arg = c["frames"][0] if c["payload"] < 0 else c["frames"]
        got = c["ecp_decode"](arg)
        assert got == c["bare_decode"](c["frames"][max(c["payload"], 0)]), c["name"]
    capsys.readouterr()
    assert bench.main(["--rounds", "1", "--round-ms", "0.01", "--bound", "1000", "--vllm-peer", "none"]) == 0
    table = capsys.readouterr().out
    assert "ADD 512-token prompt" in table and "worst ratio" in table and "floor" in table
    assert "no vLLM 0.33 peer" in table  # (the comparison with vLLM's own decoder needs its venv)
    rows = bench.measure(1, 0.00001)  # every row has its floor: the bare decode behind one length test
    assert len(rows) == len(cases) and all(r["decode"]["floor_ratio"] > 0 for r in rows)
    assert bench.main(["--rounds", "1", "--round-ms", "0.01", "--bound", "0.001", "--vllm-peer", "none"]) == 1


def test_every_release_profile_has_rows_and_decodes_them_as_its_bare_classes(capsys):
    bench = bench_codec
    cases = bench.profile_cases()
    releases = {c["release"] for c in cases}
    assert releases == set(shipped_releases())
    for c in cases:  # the profile's codec and a bare decoder of its classes agree on every frame
        assert c["profile"](c["frames"]) == c["bare"](c["frames"]), (c["release"], c["message"])
    assert all(c["api"] is not None for c in cases if c["release"] == "0.33")  # compared with the API
    capsys.readouterr()
    assert bench.main(["--profiles", "only", "--rounds", "1", "--round-ms", "0.01", "--bound", "1000"]) == 0
    table = capsys.readouterr().out
    assert "release profiles" in table and "0.32" in table and "outputs, 64 streams" in table
