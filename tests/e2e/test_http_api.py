"""``palace serve`` end to end: a real keyword-only palaced, a real ``palace serve`` process on a
free loopback port, and httpx as the client (docs/http.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from palace_client.http.openapi import EXPOSED, HIDDEN_OPS
from palaced.wire.protocol import DEFAULT_MAX_FRAME
from palaced.wire.specs import SPECS
from tests.conftest import DaemonProc, fresh_name

pytestmark = pytest.mark.daemon


@dataclass
class Served:
    proc: subprocess.Popen[str]
    base: str
    port: int
    url: str
    secret_file: Path
    secret: str
    seen: list[httpx.Response]

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client that records every response (for the no-CORS check)."""
        return httpx.Client(base_url=self.base, timeout=30,
                            event_hooks={"response": [self.seen.append]}, **kwargs)

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}

    def op(self, op: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        with self.client() as c:
            return c.post(f"/api/v1/ops/{op}", json=body, headers={**self.bearer(), **headers})


@pytest.fixture(scope="module")
def served(shared_keyword_daemon: DaemonProc) -> Iterator[Served]:
    proc = subprocess.Popen([sys.executable, "-m", "palace_client", "serve", "--port", "0",
                             "--json"], env=shared_keyword_daemon.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first, proc.stderr.read() if proc.stderr else ""
    info = json.loads(first)
    path = Path(info["secret_file"])
    s = Served(proc, info["base"], info["port"], info["url"], path,
               path.read_text().strip(), [])
    yield s
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_remember_then_recall_round_trip(served: Served) -> None:
    palace = fresh_name("http")
    made = served.op("memory.remember", {"palace": palace, "args": {
        "text": "the heron nests by the old mill", "wing": "birds"}},
        **{"X-Palace-Agent": "http:test-suite"})
    assert made.status_code == 200, made.text
    drawer = made.json()["id"]
    found = served.op("memory.recall", {"palace": palace, "args": {"query": "heron mill"}})
    assert found.status_code == 200, found.text
    hits = found.json()["results"]
    assert [h["id"] for h in hits] == [drawer]
    assert hits[0]["wing"] == "birds" and hits[0]["created_by"] == "http:test-suite"
    # Without the header the agent is the User-Agent's product.
    with served.client() as c:
        got = c.post("/api/v1/ops/memory.remember", headers=served.bearer(), json={
            "palace": palace, "args": {"text": "a second note"}})
    assert got.status_code == 200
    shown = served.op("memory.get", {"palace": palace, "args": {"id": got.json()["id"]}})
    assert shown.json()["drawer"]["created_by"] == "http:python-httpx"


def test_openapi_lists_every_exposed_op_and_validates(served: Served) -> None:
    with served.client() as c:
        doc = c.get("/api/v1/openapi.json", headers=served.bearer()).json()
    assert doc["openapi"] == "3.1.0"
    assert set(EXPOSED) == set(SPECS) - HIDDEN_OPS and "memory.recall" in EXPOSED
    ops = {path.removeprefix("/api/v1/ops/"): item for path, item in doc["paths"].items()}
    assert set(ops) == set(EXPOSED)
    for name, item in ops.items():
        assert set(item) == {"post"}, name
        schema = item["post"]["requestBody"]["content"]["application/json"]["schema"]
        Draft202012Validator.check_schema(schema)  # OpenAPI 3.1 schemas are JSON Schema 2020-12
        args = schema["properties"]["args"]
        assert set(args["properties"]) == set(SPECS[name].args), name
        assert set(args.get("required", [])) == {
            a for a, spec in SPECS[name].args.items() if spec.required}
        assert ("palace" in schema.get("required", [])) == (SPECS[name].palace == "required")
    top_k = ops["memory.recall"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["properties"]["args"]["properties"]["top_k"]
    spec = SPECS["memory.recall"].args["top_k"]
    assert (top_k["minimum"], top_k["maximum"], top_k["default"]) == (spec.min, spec.max,
                                                                      spec.default)
    # A body the schema refuses is refused by the daemon too, as INVALID_ARGS.
    bad = {"palace": "x", "args": {"query": "q", "top_k": 0}}
    validator = Draft202012Validator(
        ops["memory.recall"]["post"]["requestBody"]["content"]["application/json"]["schema"])
    assert not validator.is_valid(bad)
    refused = served.op("memory.recall", bad)
    assert refused.status_code == 400 and refused.json()["error"]["name"] == "INVALID_ARGS"


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer not-the-secret"}, {"Authorization": "Basic eDp5"},
    {"Cookie": "palace_session=forged"}])
def test_no_or_wrong_secret_is_401(served: Served, headers: dict[str, str]) -> None:
    with served.client() as c:
        for response in (c.get("/api/v1/openapi.json", headers=headers),
                         c.post("/api/v1/ops/palace.list", json={}, headers=headers),
                         c.get("/", headers=headers)):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["name"] == "UNAUTHORIZED"
        assert c.get("/login", params={"token": "wrong"}).status_code == 401
        assert c.get("/login").status_code == 401


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1",
                                  "127.0.0.2:{port}", "localhost.evil.example:{port}"])
def test_a_foreign_host_header_is_refused(served: Served, host: str) -> None:
    with served.client() as c:
        for response in (
                c.get("/api/v1/openapi.json", headers={**served.bearer(),
                                                        "Host": host.format(port=served.port)}),
                c.get("/login", params={"token": served.secret},
                      headers={"Host": host.format(port=served.port)})):
            assert response.status_code == 403
            assert response.json()["error"]["name"] == "REQUEST_REFUSED"
            assert "set-cookie" not in response.headers
    for own in (f"localhost:{served.port}", f"[::1]:{served.port}"):
        with served.client() as c:
            assert c.get("/", headers={**served.bearer(), "Host": own}).status_code == 200


def test_browser_login_cookie_and_csrf(served: Served) -> None:
    palace = fresh_name("http")
    with served.client() as c:
        login = c.get(served.url.removeprefix(served.base))
        assert login.status_code == 303 and login.headers["location"] == "/"
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert served.secret.lower() not in cookie  # the cookie is derived, not the secret
        assert c.get("/").status_code == 200  # the cookie alone reads
        session = c.get("/api/v1/session").json()
        assert session["auth"] == "cookie"
        body = {"palace": palace, "args": {"text": "written from a page"}}
        # A cross-site form or fetch carries the cookie at most, never the CSRF header.
        no_csrf = c.post("/api/v1/ops/memory.remember", json=body)
        assert no_csrf.status_code == 403 and no_csrf.json()["error"]["name"] == "REQUEST_REFUSED"
        csrf = {"X-Palace-CSRF": session["csrf"]}
        wrong = c.post("/api/v1/ops/memory.remember", json=body, headers={"X-Palace-CSRF": "x"})
        assert wrong.status_code == 403
        foreign = c.post("/api/v1/ops/memory.remember", json=body,
                         headers={**csrf, "Origin": "http://evil.example"})
        assert foreign.status_code == 403
        assert served.op("palace.info", {"palace": palace}).status_code == 404  # nothing written
        ok = c.post("/api/v1/ops/memory.remember", json=body,
                    headers={**csrf, "Origin": served.base})
        assert ok.status_code == 200, ok.text
    # Bearer requests are not CSRF-able (a browser never sends the header by itself), but a
    # foreign Origin is refused whatever the credentials.
    assert served.op("palace.info", {"palace": palace}).status_code == 200
    assert served.op("palace.info", {"palace": palace},
                     Origin="http://evil.example").status_code == 403


def test_no_cors_header_on_any_response(served: Served) -> None:
    with served.client() as c:
        c.options("/api/v1/ops/palace.list", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        c.post("/api/v1/ops/palace.list", json={},
               headers={**served.bearer(), "Origin": "http://evil.example"})
        c.get("/api/v1/openapi.json", headers={**served.bearer(), "Origin": served.base})
    assert len(served.seen) >= 3
    for response in served.seen:
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]


def test_oversized_and_non_json_bodies(served: Served) -> None:
    with served.client() as c:
        big = b'{"args": {"text": "' + b"x" * DEFAULT_MAX_FRAME + b'"}}'
        response = c.post("/api/v1/ops/memory.remember", content=big, headers={
            **served.bearer(), "Content-Type": "application/json"})
        assert response.status_code == 413
        assert response.json()["error"]["name"] == "FRAME_TOO_LARGE"
        for content, ctype in ((b"text=hi", "application/x-www-form-urlencoded"),
                               (b"{not json", "application/json"),
                               (b"[1, 2]", "application/json")):
            response = c.post("/api/v1/ops/palace.list", content=content,
                              headers={**served.bearer(), "Content-Type": ctype})
            assert response.status_code == 400, content
            assert response.json()["error"]["name"] == "INVALID_ARGS"


def test_typed_errors_map_to_statuses(served: Served) -> None:
    palace = fresh_name("http")
    assert served.op("memory.remember", {"palace": palace, "args": {"text": "kept"}}
                     ).status_code == 200
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("memory.get", {"palace": palace, "args": {"id": 999_999}}, 404, "MEMORY_NOT_FOUND"),
        ("palace.info", {"palace": fresh_name("none")}, 404, "PALACE_NOT_FOUND"),
        ("memory.recall", {"palace": palace, "args": {"query": "x", "top_k": 0}}, 400,
         "INVALID_ARGS"),
        ("memory.recall", {"palace": palace, "args": {"query": "x", "bogus": 1}}, 400,
         "INVALID_ARGS"),
        ("palace.create", {"palace": "Not A Name"}, 400, "INVALID_PALACE_NAME"),
        ("palace.create", {"palace": palace}, 409, "PALACE_EXISTS"),
        ("no.such_op", {}, 404, "UNKNOWN_OP"),
        ("daemon.stop", {}, 404, "UNKNOWN_OP"),  # hidden: the daemon keeps running
    ]
    for op, body, status, name in cases:
        response = served.op(op, body)
        error = response.json()["error"]
        assert (response.status_code, error["name"]) == (status, name), (op, response.text)
        assert set(error) == {"code", "name", "message", "retryable", "details"}
    # Governance applies to the agent an HTTP request names.
    assert served.op("palace.policy_set", {"palace": palace, "args": {
        "permission": "write", "agents": ["http:trusted"]}}).status_code == 200
    denied = served.op("memory.remember", {"palace": palace, "args": {"text": "no"}},
                       **{"X-Palace-Agent": "http:rogue"})
    assert denied.status_code == 403 and denied.json()["error"]["name"] == "FORBIDDEN"
    assert served.op("memory.remember", {"palace": palace, "args": {"text": "yes"}},
                     **{"X-Palace-Agent": "http:trusted"}).status_code == 200


def test_the_secret_file_is_private(served: Served) -> None:
    st, parent = served.secret_file.stat(), served.secret_file.parent.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(parent.st_mode) == 0o700
    assert st.st_uid == os.getuid() == parent.st_uid
    assert len(served.secret) >= 40 and served.secret in served.url
    if os.geteuid() == 0:
        runner = shutil.which("runuser") or shutil.which("setpriv")
        assert runner, "running as root needs runuser or setpriv to test another uid"
        cmd = ([runner, "-u", "nobody", "--"] if runner.endswith("runuser") else
               [runner, "--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        read = subprocess.run([*cmd, "cat", str(served.secret_file)], capture_output=True,
                              text=True, timeout=30)
        assert read.returncode != 0 and served.secret not in read.stdout
        assert "Permission denied" in read.stderr


def test_non_loopback_host_is_refused(shared_keyword_daemon: DaemonProc) -> None:
    for host in ("0.0.0.0", "192.0.2.1", "::"):
        res = shared_keyword_daemon.cli("serve", "--host", host, "--port", "0", "--json")
        assert res.returncode == 2, res.stderr
        assert json.loads(res.stdout)["error"]["name"] == "USAGE_ERROR"
        assert "ssh -L" in res.stderr


def test_stopping_removes_the_secret_file(shared_keyword_daemon: DaemonProc) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "palace_client", "serve", "--port", "0",
                             "--json"], env=shared_keyword_daemon.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    path = Path(info["secret_file"])
    secret = path.read_text().strip()
    with httpx.Client(base_url=info["base"], timeout=30) as c:
        assert c.get(info["url"].removeprefix(info["base"])).status_code == 303
        assert c.get("/login", params={"token": secret + "x"}).status_code == 401
        assert c.post("/api/v1/ops/palace.list", json={},
                      headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not path.exists()
    # The secret was printed once, in the URL for a person, and is in no log line.
    assert proc.stdout.read() == ""
    assert proc.stderr is not None and secret not in proc.stderr.read()


def test_responses_do_not_wait_for_a_delayed_ack(served: Served) -> None:
    """The listening socket is made as TCP (asyncio sets TCP_NODELAY only then): without it
    every response took >= 40 ms, Nagle's algorithm waiting for the client's delayed ACK."""
    import statistics
    import time

    times = []
    with served.client() as c:
        for _ in range(15):
            started = time.perf_counter()
            assert c.get("/api/v1/session", headers=served.bearer()).status_code == 200
            times.append(time.perf_counter() - started)
    assert statistics.median(times) < 0.025, times
