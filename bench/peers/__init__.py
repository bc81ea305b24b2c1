"""Peers measured beside pgqueue, each in a virtual environment of its own.

pgqueue never depends on them: ``python -m bench --peer-python PY`` names an interpreter whose
environment has the peer installed (``python -m venv /tmp/peers && /tmp/peers/bin/pip install
pgqueuer asyncpg``), and each peer's script runs there on a throwaway database of the same server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from bench import _db
from pgqueue._base.urls import to_libpq_url

HERE = Path(__file__).parent


#: The peers with a script here (``<name>_peer.py``).
PEERS = ("pgqueuer", "procrastinate", "awa")


def run_pgqueuer(
    server_url: URL, python: str, jobs: int, *, drain_batch: int = 0, timeout: float = 600.0
) -> dict[str, Any]:
    """pgqueuer's bulk enqueue (1,000 per call) and no-op drain (its defaults when 0)."""
    return run_peer("pgqueuer", server_url, python, jobs, drain_batch=drain_batch, timeout=timeout)


def run_peer(
    name: str,
    server_url: URL,
    python: str,
    jobs: int,
    *,
    drain_batch: int = 0,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """One peer's bulk enqueue (1,000 per call) and no-op drain (its defaults when 0)."""
    if name not in PEERS:
        raise ValueError(f"no peer script for {name!r}: one of {', '.join(PEERS)}")
    script = HERE / f"{name}_peer.py"
    with _db.throwaway_database(server_url) as url:
        done = subprocess.run(
            [python, str(script), to_libpq_url(url), str(jobs), "1000", str(drain_batch)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the {name} peer failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
