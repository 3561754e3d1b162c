"""The hop benchmark runs end to end on a small variant (its correctness, not its timing): every
receiver gets exactly the messages the frames hold (the receivers count outputs, the engine
checks each ADD it samples against its frame), and the table relates each row to its floor."""

from __future__ import annotations

import math

from benchmarks import bench_codec, hop_floor


def test_hop_floor_small_run_measures_every_receiver_against_its_floor(tmp_path):
    bench = hop_floor
    args = ["--cases", "1", "64", "add", "--transports", "ipc", "--receivers", "floor", "floor+dispatch", "ecp", "ecp-push",
            "--messages", "40", "--paced", "8", "--rounds", "2", "--peer", str(tmp_path / "no-peer")]
    rows = bench.run(bench.parse_args(args))
    assert [(r["case"], r["receiver"]) for r in rows] == [
        *((c, r) for c in ("1", "64") for r in ("floor", "floor+dispatch", "ecp", "ecp-push")),
        ("add", "floor"), ("add", "ecp")]  # pushing and dispatching outputs play no part in an ADD
    frames = bench.build_frames(["1", "64", "add"], 48)
    for r in rows:
        per_message = frames[r["case"]]["tokens"]
        assert r["messages"] == 40 and r["tokens"] == 40 * per_message and r["rounds"] == 2
        assert r["tokens_per_s"] > 0 and r["cpu_us_per_token"] >= 0
        assert r["latency_p50_us"] > 0 and r["latency_p99_us"] >= r["latency_p50_us"]
        if r["receiver"] == "floor":
            assert all(math.isclose(v, 1.0) for v in r["ratios"].values() if not math.isnan(v))
    assert frames["64"]["tokens"] == 64 and frames["add"]["tokens"] > 0
    assert "out64  ipc  ecp-push " in bench.table(rows)


def test_hop_floor_frames_are_the_codec_benchmarks_steps():
    """One helper builds the output steps: the hop benchmark sends bench_codec's frames."""
    bench = hop_floor
    codec_bench = bench_codec
    steps = {c["name"]: c["frames"][0] for c in codec_bench.cases() if c["name"].startswith("outputs step")}
    frames = bench.build_frames(["64", "256"], 0)
    assert frames["64"]["frames"] == [[steps["outputs step + stats, 64 streams"]]]
    assert frames["256"]["frames"] == [[steps["outputs step + stats, 256 streams"]]]

