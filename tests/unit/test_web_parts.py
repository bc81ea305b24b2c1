"""The dashboard's pure parts: chart geometry, CSRF tokens, credentials, basic auth, durations,
allowed hosts."""

from __future__ import annotations

import asyncio
import base64
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from pgqueue._base.durations import format_duration, parse_duration
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.web import _chart, _csrf, _hosts
from pgqueue.web._auth import BasicAuth, parse_credentials
from pgqueue.web._snapshot import DepthHistory

NOON = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


def _row(queue: str, ago: int, done: int, failed: int = 0) -> dict[str, Any]:
    minute = NOON - timedelta(minutes=ago)
    return {"queue": queue, "minute": minute, "minutes_ago": ago, "done": done, "failed": failed}


def test_finished_chart_stacks_failed_on_done_with_the_current_minute_rightmost() -> None:
    charts = _chart.finished_charts([_row("a", 0, 6, 2), _row("a", 59, 4), _row("b", 3, 1)])
    a = charts["a"]
    assert (a.peak, a.total_done, a.total_failed) == (8, 10, 2)
    oldest, newest = a.bars
    step = _chart.WIDTH / _chart.MINUTES
    assert newest.x == pytest.approx(_chart.WIDTH - step + 0.5)
    assert oldest.x == pytest.approx(0.5)
    assert newest.done_height == pytest.approx(_chart.HEIGHT * 6 / 8)
    assert newest.failed_y + newest.failed_height == pytest.approx(newest.done_y)
    assert newest.title == "12:00: 6 done, 2 failed"
    assert oldest.failed_height == 0
    assert set(charts) == {"a", "b"}


def test_finished_chart_drops_minutes_outside_the_hour() -> None:
    assert _chart.finished_charts([_row("a", 60, 5), _row("a", -1, 5)]) == {}


def test_depth_line_needs_two_samples_and_scales_to_the_peak() -> None:
    assert _chart.depth_chart([(0.0, 3)], 3600) is None
    line = _chart.depth_chart([(3600.0, 0), (1800.0, 10), (0.0, 5)], 3600)
    assert line is not None
    assert (line.peak, line.latest, line.span_s) == (10, 5, 3600.0)
    first, middle, last = line.points.split()
    assert first == f"0.0,{_chart.HEIGHT:.1f}"
    assert middle == f"{_chart.WIDTH / 2:.1f},2.0"
    assert last.startswith(f"{_chart.WIDTH:.1f},")
    flat = _chart.depth_chart([(10.0, 0), (0.0, 0)], 3600)
    assert flat is not None
    assert flat.points.endswith(f",{_chart.HEIGHT:.1f}")


def test_depth_history_keeps_an_hour_and_ignores_samples_too_close() -> None:
    now = [0.0]
    history = DepthHistory(clock=lambda: now[0])
    history.add({"a": 1})
    now[0] = 0.5
    history.add({"a": 99})  # 0.5 s later: another open page refreshing, not a new sample
    now[0] = 10.0
    history.add({"a": 3})
    chart = history.charts(["a", "b"])
    assert chart["b"] is None
    assert chart["a"] is not None
    assert (chart["a"].peak, chart["a"].latest) == (3, 3)
    now[0] = 3605.0
    history.add({"a": 4})
    assert history.charts(["a"])["a"] is not None
    now[0] = 7300.0
    history.add({"a": 4})
    assert history.charts(["a"])["a"] is None  # the older samples aged out


def test_csrf_token_is_bound_to_its_cookie_and_secret() -> None:
    secret, cookie = b"k" * 32, _csrf.new_cookie()
    token = _csrf.token_for(secret, cookie)
    assert _csrf.is_valid(secret, cookie, token)
    assert not _csrf.is_valid(secret, _csrf.new_cookie(), token)
    assert not _csrf.is_valid(b"x" * 32, cookie, token)
    assert not _csrf.is_valid(secret, cookie, None)
    assert not _csrf.is_valid(secret, None, token)
    assert not _csrf.is_valid(secret, cookie, token[:-1] + "é")
    assert _csrf.new_cookie() != _csrf.new_cookie()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("ops:pw", ("ops", "pw")), ("ops:p:w", ("ops", "p:w")), (("ops", "pw"), ("ops", "pw"))],
)
def test_credentials(value: object, expected: tuple[str, str]) -> None:
    assert parse_credentials(value) == expected


@pytest.mark.parametrize("value", ["ops", ":pw", "ops:", ("o:ps", "pw"), ("ops", "")])
def test_bad_credentials(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^auth: "):
        parse_credentials(value)
    with pytest.raises(InvalidArgumentTypeError):
        parse_credentials(["ops", "pw"])


def _status(app: BasicAuth, authorization: bytes | None) -> int:
    sent: list[dict[str, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request"}

    app.app = inner
    headers = [] if authorization is None else [(b"authorization", authorization)]
    asyncio.run(app({"type": "http", "headers": headers}, receive, send))
    return int(sent[0]["status"])


def test_basic_auth_middleware() -> None:
    app = BasicAuth(lambda s, r, w: None, credentials=("ops", "pé"))  # type: ignore[arg-type,return-value]
    good = b"Basic " + base64.b64encode("ops:pé".encode())
    assert _status(app, good) == 200
    assert _status(app, b"basic " + base64.b64encode("ops:pé".encode())) == 200
    for bad in (None, b"Basic", b"Basic ???", b"Bearer x", b"Basic " + base64.b64encode(b"ops")):
        assert _status(app, bad) == 401


def test_durations_round_trip() -> None:
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration(" 250ms ") == timedelta(milliseconds=250)
    assert format_duration(timedelta(minutes=90)) == "90m"
    for bad in ("", "soon", "-1d", "1w"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["Queue.Example.COM."], ("queue.example.com",)),
        (["[::1]", "fd00::5", "10.0.0.5"], ("::1", "fd00::5", "10.0.0.5")),
        (["*.Example.com", "*"], ("*.example.com", "*")),
        (None, ()),
        ((), ()),
    ],
)
def test_allowed_hosts_are_normalized(given: Any, expected: tuple[str, ...]) -> None:
    assert _hosts.check_allowed_hosts(given) == expected


@pytest.mark.parametrize("bad", ["a:80", "[::1]:80", "x/y", "u@h", "*x", "a.*.b", "", " ", "a b"])
def test_allowed_hosts_refuse_what_is_no_bare_name(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="allowed_hosts"):
        _hosts.check_allowed_hosts([bad])


def _call(guard: _hosts.HostGuard, headers: dict[str, str], method: str = "GET") -> int:
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    guard.app = app
    scope = {
        "type": "http",
        "method": method,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("10.1.2.3", 8080),
    }
    asyncio.run(guard(scope, lambda: None, send))  # type: ignore[arg-type]
    return int(sent[0]["status"])


def test_the_host_guard_compares_names_not_ports() -> None:
    guard = _hosts.HostGuard(lambda *a: None, allowed=("*.corp.example",))  # type: ignore[arg-type]
    assert _call(guard, {"Host": "10.1.2.3:9999"}) == 200  # the address it came in on
    assert _call(guard, {"Host": "db.corp.example"}) == 200
    assert _call(guard, {"Host": "corp.example"}) == 400
    assert _call(guard, {}) == 200  # HTTP/1.0: no browser
    assert _call(guard, {"Host": "10.1.2.3", "Origin": "http://10.1.2.3"}, "POST") == 200
    assert _call(guard, {"Host": "10.1.2.3", "Origin": "http://10.1.2.3:81"}, "POST") == 403
    assert _call(guard, {"Host": "10.1.2.3", "Origin": "https://x.corp.example"}, "POST") == 200
    assert _call(guard, {"Host": "10.1.2.3", "Origin": "http://evil.example"}, "GET") == 200
