"""The plain drain of two checkouts of pgqueue, in turns (#32 item 7: no regression).

``python -m bench.ab_drain --base PATH [--head PATH] [--url SERVER_URL] [--jobs N] [--rounds R]``

Each drain is a process of its own that imports ``pgqueue`` and ``bench._db`` from one checkout
(``--base``, e.g. a ``git worktree`` of an older commit; ``--head``, this one by default), fills
a fresh database with ``--jobs`` no-op jobs of one queue and drains them with one in-process
``Worker(concurrency=4, listen=False)``, the root logger at INFO; the rate is the steady one,
from the first handler call to the last (start-up and imports left out). The sides alternate,
the order reversed every round. Prints one JSON line per drain, then each side's median rate
and CPU per job (``time.process_time`` of the drain) and the ratio head / base. Not part of
``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

#: What one drain runs, in the checkout given as its first argument.
_DRAIN = """
import json, logging, sys, time
tree, url, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import pgqueue
from bench import _db
if not pgqueue.__file__.startswith(tree):
    raise SystemExit(f"pgqueue came from {pgqueue.__file__}, not {tree}")
logging.getLogger().setLevel(logging.INFO)
times = []
def handler(job):
    times.append(time.perf_counter())
with _db.server(url) as (server_url, _), _db.throwaway_database(server_url) as db_url:
    _db.fill(db_url, jobs)
    engine = _db.make_engine(db_url, pool_size=10)
    worker = pgqueue.Worker(
        engine, {_db.QUEUE: handler}, concurrency=4, listen=False, install_signal_handlers=False
    )
    cpu = time.process_time()
    worker.run(until_empty=True)
    cpu = time.process_time() - cpu
    engine.dispose()
if len(times) != jobs:
    raise SystemExit(f"{len(times)} of {jobs} jobs ran")
print(json.dumps({"jobs_per_s": (jobs - 1) / (times[-1] - times[0]), "cpu_us": cpu / jobs * 1e6}))
"""


def drain(tree: str, url: str, jobs: int) -> dict[str, float]:
    """One drain by the checkout at ``tree``, in a process of its own."""
    proc = subprocess.run(
        [sys.executable, "-c", _DRAIN, tree, url, str(jobs)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the drain of {tree} failed: {proc.stderr[-2000:]}")
    result: dict[str, float] = json.loads(proc.stdout.splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab_drain", description=__doc__)
    parser.add_argument("--base", required=True, help="the checkout to compare against")
    parser.add_argument("--head", default=os.getcwd(), help="default: the current directory")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    sides = {"base": os.path.abspath(args.base), "head": os.path.abspath(args.head)}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name in sides if round_ % 2 == 0 else reversed(list(sides)):
            run = drain(sides[name], args.url, args.jobs)
            runs[name].append(run)
            print(json.dumps({"round": round_, "side": name, **run}), flush=True)
    medians = {
        name: {key: statistics.median(r[key] for r in rs) for key in ("jobs_per_s", "cpu_us")}
        for name, rs in runs.items()
    }
    for name, median in medians.items():
        print(json.dumps({"side": name, "tree": sides[name], **median}))
    ratio = medians["head"]["jobs_per_s"] / medians["base"]["jobs_per_s"]
    per_round = [
        h["jobs_per_s"] / b["jobs_per_s"] for h, b in zip(runs["head"], runs["base"], strict=True)
    ]
    print(json.dumps({"ratio": ratio, "median_of_round_ratios": statistics.median(per_round)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
