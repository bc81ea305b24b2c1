"""The table, the JSON and (where matplotlib is importable) a PNG of one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: (section, metric, pgqueue figure, raw-limit figure, target ratio or None, higher is better).
#: The I/O-bound drain's "raw limit" is its ideal: slots / wait, as if pgqueue cost nothing.
Row = tuple[str, str, float, "float | None", "float | None", bool]


def rows(results: dict[str, Any]) -> list[Row]:
    """Every figure with its raw limit and the issue's target, in table order."""
    out: list[Row] = []
    enq = results.get("enqueue")
    if enq:
        single, many = enq["single"], enq["many"]
        out.append(
            (
                "enqueue",
                "enqueue(), 1/tx, jobs/s",
                single["jobs_per_s"],
                single["raw_jobs_per_s"],
                0.8,
                True,
            )
        )
        out.append(
            (
                "enqueue",
                "enqueue_many x1000, jobs/s",
                many["jobs_per_s"],
                many["raw_jobs_per_s"],
                None,
                True,
            )
        )
        if "no_trigger_insert_jobs_per_s" in many:
            out.append(
                (
                    "enqueue",
                    "enqueue_many x1000 vs INSERT x1000 without trigger, jobs/s",
                    many["jobs_per_s"],
                    many["no_trigger_insert_jobs_per_s"],
                    0.5,
                    True,
                )
            )
    drain = results.get("drain")
    if drain:
        limit = drain["pgbench"]["jobs_per_s"]
        for w in drain["worker"]:
            out.append(
                (
                    "drain",
                    f"worker c={w['concurrency']}, jobs/s",
                    w["jobs_per_s"],
                    limit,
                    0.65,
                    True,
                )
            )
        tuned = drain.get("worker_tuned")
        if tuned:
            metric = (
                f"worker c={tuned['concurrency']} batch_size={tuned['batch_size']} "
                f"prefetch={tuned['prefetch']}, jobs/s"
            )
            out.append(("drain", metric, tuned["jobs_per_s"], limit, None, True))
        coroutines = drain.get("worker_async")
        if coroutines:
            metric = f"worker async async_concurrency={coroutines['async_concurrency']}, jobs/s"
            out.append(("drain", metric, coroutines["jobs_per_s"], limit, None, True))
    if results.get("peers", {}).get("pgqueuer") and enq and drain:
        out.extend(_peer_rows(results["peers"], enq, drain))
    for name in ("procrastinate", "awa"):
        other = results.get("peers", {}).get(name)
        if other and enq and drain:
            best = max(w["jobs_per_s"] for w in drain["worker"])
            out += [
                (
                    "peers",
                    f"enqueue_many x1000 vs {name} bulk enqueue, jobs/s",
                    enq["many"]["jobs_per_s"],
                    other["enqueue_jobs_per_s"],
                    None,
                    True,
                ),
                (
                    "peers",
                    f"best drain vs {name} drain (its defaults), jobs/s",
                    best,
                    other["drain_jobs_per_s"],
                    None,
                    True,
                ),
            ]
    io = results.get("io")
    if io:
        out.extend(_io_rows(io))
    lat = results.get("latency")
    if lat:
        for p in ("p50", "p90", "p99"):
            target = 1.2 if p == "p50" else None
            out.append(
                (
                    "latency",
                    f"enqueue->start {p}, ms",
                    lat["worker"][f"{p}_ms"],
                    lat["raw"][f"{p}_ms"],
                    target,
                    False,
                )
            )
        if "raw_tx" in lat:
            out.append(
                (
                    "latency",
                    "enqueue->start p50 vs a floor claiming in a transaction, ms",
                    lat["worker"]["p50_ms"],
                    lat["raw_tx"]["p50_ms"],
                    None,
                    False,
                )
            )
    waited = results.get("wait_for")
    if waited:
        for p in ("p50", "p99"):
            out.append(
                (
                    "wait_for",
                    f"completion commit->wait_for returns {p}, ms (floor: bare LISTEN)",
                    waited["wait_for"][f"{p}_ms"],
                    waited["raw"][f"{p}_ms"],
                    None,
                    False,
                )
            )
    scale = results.get("scale")
    if scale:
        rows_k = f"{scale['done_rows']:,}"
        for what in ("claim", "reap"):
            out.append(
                (
                    "scale",
                    f"{what} with {rows_k} done, ms",
                    scale["history"][f"{what}_ms"],
                    scale["empty"][f"{what}_ms"],
                    1.2,
                    False,
                )
            )
    if results.get("claim"):
        out.extend(_claim_rows(results["claim"]))
    rss = results.get("rss")
    if rss:
        metric = f"worker c={rss['concurrency']} peak RSS, MB"
        out.append(("memory", metric, rss["hwm_kb"] / 1024, None, None, False))
    coroutines = (drain or {}).get("worker_async")
    if coroutines:
        metric = f"worker async async_concurrency={coroutines['async_concurrency']} peak RSS, MB"
        out.append(("memory", metric, coroutines["hwm_kb"] / 1024, None, None, False))
    return out


def _peer_rows(peers: dict[str, Any], enq: dict[str, Any], drain: dict[str, Any]) -> list[Row]:
    """pgqueue against pgqueuer: the "raw limit" column holds pgqueuer's figure."""
    defaults, tuned = peers["pgqueuer"], peers.get("pgqueuer_batch_50")
    workers = {w["concurrency"]: w["jobs_per_s"] for w in drain["worker"]}
    best = max(workers, key=lambda c: workers[c])
    out: list[Row] = [
        (
            "peers",
            "enqueue_many x1000 vs pgqueuer enqueue x1000, jobs/s",
            enq["many"]["jobs_per_s"],
            defaults["enqueue_jobs_per_s"],
            1.5,
            True,
        ),
        (
            "peers",
            f"best drain (c={best}) vs pgqueuer drain (its defaults), jobs/s",
            workers[best],
            defaults["drain_jobs_per_s"],
            3.0,
            True,
        ),
    ]
    if 4 in workers:
        out.append(
            (
                "peers",
                "drain c=4 (the default) vs pgqueuer drain (its defaults), jobs/s",
                workers[4],
                defaults["drain_jobs_per_s"],
                2.0,
                True,
            )
        )
    if tuned:
        out.append(
            (
                "peers",
                f"best drain (c={best}) vs pgqueuer drain batch_size=50, jobs/s",
                workers[best],
                tuned["drain_jobs_per_s"],
                None,
                True,
            )
        )
    return out


def _io_rows(io: dict[str, Any]) -> list[Row]:
    """The I/O-bound drain: each lane against its ideal (slots / wait), their ratio, threads."""
    lanes = {
        f"threads c={io['threads']['concurrency']}": io["threads"],
        f"coroutines async_concurrency={io['coroutines']['async_concurrency']}": io["coroutines"],
    }
    wait = f"{io['sleep_ms']:.0f} ms jobs"
    out: list[Row] = [
        ("io", f"{name}, {wait}, jobs/s", run["jobs_per_s"], run["ideal_jobs_per_s"], None, True)
        for name, run in lanes.items()
    ]
    out.append(("io", "coroutines / threads, jobs/s ratio", io["ratio"], None, None, True))
    out.extend(
        ("io", f"{name}, peak threads", run["peak_threads"], None, None, False)
        for name, run in lanes.items()
    )
    return out


def _claim_rows(claim: dict[str, Any]) -> list[Row]:
    """Each state's claim of 10, p50 and p90, against the baseline's (the "raw limit" column)."""
    states = (
        (
            f"{claim['ready']:,} ready + {claim['future']:,} due in 1 h at 5-9",
            "future_backlog",
            1.2,
        ),
        (f"{claim['backlog']:,} ready at 0-9", "ready_backlog", None),
    )
    base = claim["baseline"]
    out: list[Row] = []
    for state, key, target in states:
        for p in ("p50", "p90"):
            out.append(
                (
                    "claim",
                    f"claim of 10, {state}, {p} ms",
                    claim[key][f"{p}_ms"],
                    base[f"{p}_ms"],
                    target if p == "p50" else None,
                    False,
                )
            )
    return out


#: Under the table when the claim section ran: what its "raw limit" column holds.
CLAIM_NOTE = (
    "claim: one claim of 10 per transaction, rolled back (the table never changes), p50 and p90 "
    "of {samples} claims; the raw-limit column is the baseline, {ready:,} ready jobs at "
    "priority 0; VACUUM ANALYZE after each fill."
)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def verdict(row: Row) -> tuple[float | None, str]:
    """The ratio to the limit and whether the target is met."""
    _, metric, value, limit, target, higher = row
    if metric.endswith("peak RSS, MB"):
        return None, "yes" if value < 80 else "no"
    if metric == "enqueue_many x1000, jobs/s":
        ratio = value / limit if limit else None
        return ratio, "yes" if value >= 100_000 else "no"
    if limit is None or limit == 0:
        return None, "-"
    ratio = value / limit
    if target is None:
        return ratio, "-"
    met = ratio >= target if higher else ratio <= target
    return ratio, "yes" if met else "no"


def table(results: dict[str, Any]) -> str:
    """A Markdown table: pgqueue, the raw limit, the ratio, the target and whether it is met."""
    lines = [
        "| section | metric | pgqueue | raw limit | ratio | target | met |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    targets = {
        "enqueue(), 1/tx, jobs/s": ">= 0.8x",
        "enqueue_many x1000, jobs/s": ">= 100,000/s",
    }
    for row in rows(results):
        section, metric, value, limit, target, higher = row
        ratio, met = verdict(row)
        wanted = "< 80 MB" if section == "memory" else targets.get(metric)
        if wanted is None and target is not None:
            wanted = f"{'>=' if higher else '<='} {target}x"
        if section == "drain" and met == "no" and not _is_best(results, metric):
            met = "-"  # the target is for the best concurrency
        lines.append(
            f"| {section} | {metric} | {_fmt(value)} | {_fmt(limit)} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {wanted or '-'} | {met} |"
        )
    if results.get("claim"):
        lines += ["", CLAIM_NOTE.format(**results["claim"])]
    return "\n".join(lines)


def _is_best(results: dict[str, Any], metric: str) -> bool:
    best = max(results["drain"]["worker"], key=lambda w: w["jobs_per_s"])
    return metric == f"worker c={best['concurrency']}, jobs/s"


def write(results: dict[str, Any], out: Path) -> list[Path]:
    """``results.json``, ``results.md`` and, where matplotlib is importable, ``drain.png``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "results.md"]
    written[0].write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    written[1].write_text(table(results) + "\n", encoding="utf-8")
    png = _chart(results, out / "drain.png")
    if png is not None:
        written.append(png)
    return written


def _chart(results: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib  # type: ignore[import-not-found]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    except ImportError:
        return None
    drain = results.get("drain")
    if not drain:
        return None
    conc = [w["concurrency"] for w in drain["worker"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(conc, [w["jobs_per_s"] for w in drain["worker"]], marker="o", label="pgqueue Worker")
    ax.axhline(drain["pgbench"]["jobs_per_s"], linestyle="--", label="pgbench, 8 clients")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("jobs/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
