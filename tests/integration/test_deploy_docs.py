"""docs/deploy.md holds: every YAML block parses, the KEDA query counts ready jobs on
``jobs_ready_idx`` in a real database, and the recipes' timeouts exceed the worker's shutdown.

PyYAML is in the ``dev`` extra only (a parser for the docs' tests, nothing pgqueue imports).
"""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, text

from pgqueue import worker as worker_module
from pgqueue.cli.supervisor import SupervisorOptions

DEPLOY = Path(__file__).parents[2] / "docs" / "deploy.md"
#: What a child may take to stop before the supervisor kills it.
STOP_BUDGET = worker_module.Worker.__init__.__kwdefaults__["shutdown_timeout"] + (
    SupervisorOptions(processes=1).stop_margin
)


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DEPLOY.read_text(), re.M | re.S)


def documents() -> list[dict[str, Any]]:
    found = [doc for block in blocks("yaml") for doc in yaml.safe_load_all(block)]
    assert all(isinstance(doc, dict) for doc in found)
    return found


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents() if doc.get("kind") == kind]


def test_every_yaml_block_parses() -> None:
    assert len(blocks("yaml")) >= 3
    kinds = {doc["kind"] for doc in documents()}
    assert {"Deployment", "ScaledObject", "TriggerAuthentication", "Secret"} <= kinds


def test_the_deployment_outlasts_the_shutdown_and_probes_the_health_port() -> None:
    (deployment,) = by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > STOP_BUDGET
    (container,) = pod["containers"]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    (port,) = container["ports"]
    assert int(args["health-port"]) == port["containerPort"]
    assert args["health-host"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert container["resources"]["requests"]["cpu"] == args["processes"]
    names = {e["name"] for e in container["env"]}
    assert {"PGQUEUE_DATABASE_URL", "PGQUEUE_LISTEN_URL"} <= names
    assert "$(PGQUEUE_LISTEN_URL)" in args["listen-url"]


def test_the_systemd_unit_stops_gracefully() -> None:
    (unit_text,) = blocks("ini")
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(unit_text)
    service = unit["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) > STOP_BUDGET
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"


def keda_query() -> str:
    (scaled,) = by_kind("ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    cap = scaled["spec"]["maxReplicaCount"] * int(trigger["metadata"]["targetQueryValue"])
    query = str(trigger["metadata"]["query"])
    assert f"LIMIT {cap})" in query  # the cap is max replicas x target, as the docs say
    return query


def test_the_keda_query_counts_ready_jobs_on_the_ready_index(engine: Engine) -> None:
    query = keda_query()
    with engine.begin() as conn:
        # A table with history: done jobs, future jobs, another queue, and a few ready emails.
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts) "
                "SELECT 'emails', '{}', 'done', 1 FROM generate_series(1, 20000)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, run_at) "
                "SELECT 'emails', '{}', now() + interval '1 hour' FROM generate_series(1, 300)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload) "
                "SELECT 'other', '{}' FROM generate_series(1, 300)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload) "
                "SELECT 'emails', '{}' FROM generate_series(1, 42)"
            )
        )
        conn.execute(text("ANALYZE jobs"))
    with engine.connect() as conn:
        assert conn.execute(text(query)).scalar_one() == 42
        plan = conn.execute(text(f"EXPLAIN (FORMAT JSON) {query}")).scalar_one()
    assert "jobs_ready_idx" in json.dumps(plan), plan
    assert "Seq Scan" not in json.dumps(plan), plan


def test_the_keda_query_stops_counting_at_its_cap(engine: Engine) -> None:
    query = keda_query()
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload) "
                "SELECT 'emails', '{}' FROM generate_series(1, 2500)"
            )
        )
    with engine.connect() as conn:
        assert conn.execute(text(query)).scalar_one() == 2000
