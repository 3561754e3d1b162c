"""The machine-cost benchmark runs end to end (a tiny variant: no timing is asserted here)."""

from __future__ import annotations

from benchmarks import engine_machine_cost


def test_both_ways_serve_requests_to_the_end_and_the_ratio_is_printed(capsys):
    bench = engine_machine_cost
    # max_tokens 128 at 4 in flight: 0.3 s runs requests to their terminal output and replaces them
    results = bench.main(["--seconds", "0.3", "--rounds", "1", "--concurrency", "4"])
    assert set(results) == {"codec", "machine"}
    assert all(len(v) == 1 and v[0] > 0 for v in results.values())
    assert "machine / codec:" in capsys.readouterr().out


def test_the_machine_way_judges_every_message_it_sends():
    bench = engine_machine_cost
    # the machine raises on any message the tables forbid, so a full round without an error
    # means every ADD, first token and terminal output the core produced was allowed
    tok_s, steps_s = bench.run("machine", 0.3, 8)
    assert tok_s > 0 and steps_s > 0
