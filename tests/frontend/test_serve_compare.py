"""The short variant of benchmarks/serve_compare.py: ``ecp serve`` in front of a real ``ecp engine``
(tcp handshake), a tiny load, and the vLLM frontends skipped (and said so) without a peer.
Figures are not asserted."""

from __future__ import annotations

import json

from benchmarks import serve_compare


def test_serve_compare_runs_ecp_serve_and_skips_absent_peers(tmp_path, capsys):
    compare = serve_compare
    rc = compare.main(["--peer", str(tmp_path / "no-peer"), "--step-time-ms", "0", "-c", "2", "-n", "6",
                       "--input-len", "8", "--output-len", "4", "--start-timeout", "60", "--timeout", "60",
                       "--ecp-api-servers", "1", "2", "--json"])
    out, err = capsys.readouterr()
    assert "skipping vllm, vllm-rs" in err and "generator ecp bench serve" in err
    rows = json.loads(out)
    assert rc == 0, rows
    assert [(r["frontend"], r["step_ms"]) for r in rows] == [("ecp", 0.0), ("ecp:2", 0.0)]
    for row in rows:
        assert row["generator"] == "ecp bench serve"
        assert row["completed"] == 6 and row["failed"] == 0 and row["output_tokens"] == 24
        # ITL may be absent: flat out, 4 tokens can arrive as one SSE event
        assert row["output_tok_s"] > 0 and row["ttft_p50"] is not None
        assert row["frontend_cpu_s"] >= 0  # measured (a tiny load may take less than one clock tick)


def test_serve_compare_table_puts_ecp_against_each_other_frontend():
    compare = serve_compare
    rows = [{"frontend": f, "step_ms": 0.0, "output_tok_s": tok, "ttft_p50": ttft, "itl_p50": 1.0, "itl_p99": 4.0}
            for f, tok, ttft in (("vllm", 100.0, 40.0), ("vllm-rs", 400.0, 10.0), ("ecp", 200.0, 20.0))]
    text = compare.table(rows)
    assert "| 0 ms | ecp / vllm-rs (Rust) | 0.50× | 2.00× | 1.00× / 1.00× |" in text
    assert "| 0 ms | ecp / vLLM 0.33 Python | 2.00× | 0.50× | 1.00× / 1.00× |" in text


def test_serve_compare_table_has_each_api_server_count_and_the_frontend_cpu():
    compare = serve_compare
    rows = [{"frontend": f, "step_ms": 10.0, "output_tok_s": tok, "ttft_p50": 20.0, "itl_p50": 1.0, "itl_p99": 4.0,
             "frontend_cpu_s": cpu, "duration_s": 2.0, "output_tokens": 1000}
            for f, tok, cpu in (("vllm-rs", 400.0, 0.5), ("ecp", 200.0, 1.0), ("ecp:2", 300.0, 1.5))]
    text = compare.table(rows)
    assert "| 10 ms | `ecp serve` ×2 API servers | 300 |" in text
    assert "| 0.75 / 1500.0 µs |" in text  # 1.5 CPU s over 2 s, for 1,000 tokens
    assert "| 10 ms | ecp ×2 / vllm-rs (Rust) | 0.75× |" in text


def test_serve_compare_agreement_compares_the_generators_means():
    compare = serve_compare
    rows = [{"frontend": "ecp", "step_ms": 10.0, "generator": g, "output_tok_s": tok, "ttft_p50": ttft,
             "ttft_p99": 2 * ttft, "itl_p50": 10.0, "itl_p99": 20.0}
            for g, tok, ttft in (("vllm-rs bench serve", 100.0, 40.0), ("ecp bench serve", 110.0, 44.0),
                                 ("vllm-rs bench serve", 100.0, 60.0), ("ecp bench serve", 90.0, 46.0))]
    text = compare.agreement(rows)
    assert "| 10 ms | `ecp serve` | vllm-rs bench serve | 2 | 100.0 | 50.0 | 100.0 | 10.00 | 20.00 |" in text
    assert "| 10 ms | `ecp serve` | ecp / vllm-rs | | 1.00× | 0.90× | 0.90× | 1.00× | 1.00× |" in text


def test_tree_cpu_seconds_counts_the_descendants():
    """The frontend CPU column counts every process of a frontend (a wrapper script's children too)."""
    import subprocess
    import sys
    from pathlib import Path

    from benchmarks.procstat import tree_cpu_seconds

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('done', flush=True)\ntime.sleep(30)"
    wrapper = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "{burn}"; true'], stdout=subprocess.PIPE, text=True)
    try:
        assert wrapper.stdout.readline().strip() == "done"  # the grandchild burnt 0.3 s of CPU
        assert tree_cpu_seconds(wrapper.pid) >= 0.25
    finally:
        subprocess.run(["pkill", "-P", str(wrapper.pid)], check=False)
        wrapper.kill()
        wrapper.wait(10)


def test_serve_compare_judges_the_targets_per_round_and_generator():
    """Each round's runs are compared side by side, per generator, and the vllm-rs targets
    (tok/s >= 1.0x, TTFT p50 <= 1.25x, ITL p99 <= 1.0x) are judged per pair."""
    compare = serve_compare
    rows = [{"frontend": f, "step_ms": 0.0, "round": rnd, "generator": g, "output_tok_s": tok, "ttft_p50": ttft,
             "itl_p50": 1.0, "itl_p99": itl}
            for rnd, g, f, tok, ttft, itl in (
                (0, "vllm-rs bench serve", "vllm-rs", 100.0, 40.0, 10.0), (0, "vllm-rs bench serve", "ecp", 110.0, 48.0, 9.0),
                (1, "vllm-rs bench serve", "vllm-rs", 100.0, 40.0, 10.0), (1, "vllm-rs bench serve", "ecp", 110.0, 52.0, 9.0),
                (1, "ecp bench serve", "vllm-rs", 100.0, 40.0, 10.0), (1, "ecp bench serve", "ecp", 90.0, 40.0, 11.0))]
    text = compare.table(rows)
    assert "| 0 ms | ecp / vllm-rs (Rust) (round 1, vllm-rs bench serve) | 1.10× | 1.20× | 1.00× / 0.90× |" in text
    assert "| 0 ms | ecp / vllm-rs (Rust) (round 1, vllm-rs bench serve) | met |" in text
    assert "| 0 ms | ecp / vllm-rs (Rust) (round 2, vllm-rs bench serve) | not met (TTFT p50 ≤ 1.25×: 1.30×) |" in text
    assert ("| 0 ms | ecp / vllm-rs (Rust) (round 2, ecp bench serve) | "
            "not met (tok/s ≥ 1.0×: 0.90×; ITL p99 ≤ 1.0×: 1.10×) |") in text


def test_serve_compare_interleaved_rounds_load_each_frontend_once_per_round(tmp_path, capsys):
    compare = serve_compare
    rc = compare.main(["--peer", str(tmp_path / "no-peer"), "--frontends", "ecp", "--step-time-ms", "0",
                       "-c", "2", "-n", "4", "--input-len", "8", "--output-len", "4", "--start-timeout", "60",
                       "--timeout", "60", "--interleave", "--rounds", "3", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0, rows
    assert [(r["frontend"], r["round"]) for r in rows] == [("ecp", 0), ("ecp", 1), ("ecp", 2)]
    assert all(r["completed"] == 4 and r["failed"] == 0 for r in rows)


def test_serve_compare_medians_relate_each_round_to_vllm_rs_in_the_same_round():
    compare = serve_compare
    figures = ((0, "vllm-rs", 100.0, 40.0, 10.0), (0, "ecp", 120.0, 44.0, 8.0),   # met
               (1, "vllm-rs", 100.0, 20.0, 10.0), (1, "ecp", 90.0, 44.0, 8.0),    # tok/s and TTFT fail
               (2, "vllm-rs", 200.0, 40.0, 10.0), (2, "ecp", 220.0, 40.0, 12.0))  # ITL fails
    rows = [{"frontend": f, "step_ms": 0.0, "round": rnd, "generator": "vllm-rs bench serve", "output_tok_s": tok,
             "ttft_p50": ttft, "itl_p50": 1.0, "itl_p99": itl} for rnd, f, tok, ttft, itl in figures]
    text = compare.medians(rows)
    # medians of each side, then of the per-round ratios (1.2, 0.9, 1.1 / 1.1, 2.2, 1.0 / 0.8, 0.8, 1.2)
    assert "| 0 ms | vllm-rs bench serve | vllm-rs (Rust) | 3 | 100 | 40.0 | 10.0 | | | | |" in text
    assert "| 0 ms | vllm-rs bench serve | `ecp serve` | 3 | 120 | 44.0 | 8.0 | 1.10× | 1.10× | 0.80× | 1 of 3 |" in text
