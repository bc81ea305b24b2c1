"""The benchmark's smoke run (``python -m bench --smoke``) against the test server.

Only that it runs end to end and reports every section: no figure is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench_runs import ROOT, run_bench

SECTIONS = (
    "environment",
    "enqueue",
    "drain",
    "io",
    "latency",
    "wait_for",
    "scale",
    "claim",
    "rss",
)


@pytest.mark.db
@pytest.mark.slow
def test_smoke_run_reports_every_section(pg_server: Any, tmp_path: Path) -> None:
    stdout = run_bench("bench", pg_server, "--smoke", "--out", str(tmp_path), timeout=300)
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert [s for s in SECTIONS if s not in results] == []
    assert results["drain"]["pgbench"]["jobs_per_s"] > 0
    assert [w["concurrency"] for w in results["drain"]["worker"]] == [1, 4]
    assert all(w["done"] == results["drain"]["jobs"] for w in results["drain"]["worker"])
    coroutines = results["drain"]["worker_async"]
    assert (coroutines["handler"], coroutines["done"]) == ("async-noop", results["drain"]["jobs"])
    io = results["io"]
    assert [io[lane]["handler"] for lane in ("threads", "coroutines")] == [
        "sync-sleep",
        "async-sleep",
    ]
    assert all(io[lane]["done"] == io["jobs"] for lane in ("threads", "coroutines"))
    assert io["ratio"] > 0
    assert all(io[lane]["peak_threads"] >= 1 for lane in ("threads", "coroutines"))
    claim = results["claim"]
    states = ("baseline", "future_backlog", "ready_backlog")
    assert all(claim[s]["p50_ms"] > 0 and claim[s]["p90_ms"] > 0 for s in states)
    assert all(claim[s]["samples"] == claim["samples"] for s in states)
    # The future jobs (priorities 5-9) are never claimed; the ready backlog gives its 9s first.
    assert [claim[s]["claimed_priorities"] for s in states] == [[0], [0], [9]]
    assert claim["future_ratio"] > 0
    assert claim["backlog_ratio"] > 0
    assert "| drain |" in stdout
    waited = results["wait_for"]
    assert [waited[k]["samples"] for k in ("wait_for", "raw")] == [20, 20]
    assert "| wait_for |" in stdout
    assert "| io |" in stdout
    assert stdout.count("| claim | claim of 10, ") == 4
    assert "the raw-limit column is the baseline" in stdout


@pytest.mark.db
def test_durable_bench_drains_beside_awaiting_jobs(pg_server: Any) -> None:
    """``python -m bench.durable`` (#33) runs end to end: the ready jobs beside the awaiting
    ones are all drained (the ratio is reported, not asserted: docs/benchmarks.md has it)."""
    stdout = run_bench(
        "bench.durable", pg_server, "--jobs", "500", "--awaiting", "500", "--rounds", "1"
    )
    out = json.loads(stdout)
    assert (out["jobs"], out["awaiting"]) == (500, 500)
    assert out["ratio"] > 0


@pytest.mark.db
def test_log_drain_bench_stores_every_line_and_reports_each_variant(pg_server: Any) -> None:
    """``python -m bench.log_drain`` (#34) runs end to end: every job of the logging drains
    stored its 10 lines, and each variant has its median (the ratios are reported, not asserted:
    docs/benchmarks.md has them)."""
    stdout = run_bench("bench.log_drain", pg_server, "--jobs", "200", "--rounds", "1")
    out = [json.loads(line) for line in stdout.splitlines()]
    runs = {o["variant"]: o for o in out if "round" in o}
    assert set(runs) == {"off", "noop", "log10", "joblog10", "stdlib5"}
    assert all(r["done"] == 200 and r["failed"] == 0 for r in runs.values())
    assert [(runs[v]["logged_jobs"], runs[v]["lines"]) for v in ("log10", "joblog10")] == [
        (200, 2000),
        (200, 2000),
    ]
    assert (runs["stdlib5"]["logged_jobs"], runs["stdlib5"]["lines"]) == (0, None)
    medians = {o["variant"]: o for o in out if "median_jobs_per_s" in o}
    assert medians["log10"]["ratio_to_noop"] > 0


@pytest.mark.db
def test_pages_bench_times_the_queue_page_and_the_graph(pg_server: Any) -> None:
    """``python -m bench.pages`` (#34) runs end to end: the queue page shows the counts of the
    table (done estimated past 10,000, exact below), the graph a box per job."""
    stdout = run_bench(
        "bench.pages", pg_server, "--done", "3000", "--nodes", "60", "--requests", "1"
    )
    out = json.loads(stdout)
    shown, true = out["queue_page"]["shown"], out["true_counts"]
    assert {k: shown[k] for k in true} == true
    assert out["graph_page"]["boxes"] == 60
    assert out["queue_page"]["median_ms"] > 0


@pytest.mark.db
def test_ab_drain_bench_runs_both_checkouts_in_turns(pg_server: Any) -> None:
    """``python -m bench.ab_drain`` (#32 item 7) runs end to end: here both sides are this
    checkout, each drain in a process of its own importing pgqueue from its side's tree."""
    tree = str(ROOT)
    stdout = run_bench(
        "bench.ab_drain",
        pg_server,
        "--base",
        tree,
        "--head",
        tree,
        "--jobs",
        "200",
        "--rounds",
        "2",
    )
    out = [json.loads(line) for line in stdout.splitlines()]
    drains = [o for o in out if "round" in o]
    assert [(o["round"], o["side"]) for o in drains] == [
        (0, "base"),
        (0, "head"),
        (1, "head"),
        (1, "base"),
    ]
    assert all(o["jobs_per_s"] > 0 and o["cpu_us"] > 0 for o in drains)
    assert out[-1]["ratio"] > 0
