"""No database: pulses, connection names, doctor's headroom rule, exit descriptions, the health
server's HTTP answers, and the new options' validation."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from sqlalchemy import create_engine

import pgqueue
from pgqueue._base.connections import name_kwargs, worker_name
from pgqueue._worker.pulse import Pulse
from pgqueue.cli.supervisor import describe_exit
from pgqueue.doctor import headroom_severity
from pgqueue.health import Health, HealthServer


def test_a_waiting_loop_is_never_stuck_a_busy_one_is_after_the_limit() -> None:
    pulse = Pulse("claimer")
    pulse.step()
    started = pulse._state[0]
    assert pulse.problem(5.0, now=started + 4.0) is None
    assert pulse.problem(5.0, now=started + 6.0) == "stuck in one step for 6s"
    pulse.waiting()
    assert pulse.problem(5.0, now=started + 3600.0) is None


def test_a_loop_whose_thread_ended_is_reported_unless_it_finished() -> None:
    crashed, finished = Pulse("heartbeat"), Pulse("completer")
    for pulse, finish in ((crashed, False), (finished, True)):

        def loop(pulse: Pulse = pulse, finish: bool = finish) -> None:
            pulse.attach()
            if finish:
                pulse.finish()

        thread = threading.Thread(target=loop)
        thread.start()
        thread.join(10)
    assert crashed.problem(60.0) == "its thread ended"
    assert finished.problem(60.0) is None


def test_worker_names_keep_the_pid_within_postgres_63_bytes() -> None:
    assert worker_name(pid=42, host="node-a") == "pgqueue-worker:node-a:42"
    long_name = worker_name(pid=1234567, host="h" * 80)
    assert len(long_name) == 63
    assert long_name.endswith(":1234567")
    assert name_kwargs("postgresql://u@h/db", "x") == {"application_name": "x"}
    assert name_kwargs("postgresql://u@h/db?application_name=mine", "x") == {}


def test_headroom_warns_below_a_tenth_of_usable_connections_and_at_least_five() -> None:
    assert headroom_severity(97, 80) == "ok"  # 17 free
    assert headroom_severity(97, 88) == "warning"  # 9 free, under 9.7
    assert headroom_severity(20, 14) == "ok"  # 6 free
    assert headroom_severity(20, 16) == "warning"  # 4 free, under the minimum of 5
    assert headroom_severity(1000, 905) == "warning"


def test_exit_descriptions() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"


class _Probe:
    def __init__(self) -> None:
        self.live = Health.of({"claimer": "ok"})

    def liveness(self) -> Health:
        return self.live

    def readiness(self) -> Health:
        return Health.of({"database": "connection refused"})


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_the_health_server_answers_200_503_and_404_with_json() -> None:
    probe = _Probe()
    with HealthServer(probe) as server:
        assert _get(server.port, "/livez") == (200, {"status": "ok", "checks": {"claimer": "ok"}})
        probe.live = Health.of({"claimer": "stuck in one step for 70s"})
        assert _get(server.port, "/livez?verbose=1")[0] == 503
        assert _get(server.port, "/readyz") == (
            503,
            {"status": "fail", "checks": {"database": "connection refused"}},
        )
        assert _get(server.port, "/")[0] == 404


@pytest.mark.parametrize(
    ("option", "value"),
    [("health_port", -1), ("health_port", 70_000), ("health_port", True), ("stuck_after", 0)],
)
def test_bad_health_options_are_refused_before_anything_runs(option: str, value: object) -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(pgqueue.InvalidArgumentError, match=option):
            pgqueue.Worker(engine, {"q": lambda job: None}, **{option: value})  # type: ignore[arg-type]
    finally:
        engine.dispose()
