"""The HTTP API's derivations, in process: request schemas from the op specs, one status per
error class, and the security checks' decisions (docs/http.md)."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from palace_client.http import security
from palace_client.http.openapi import (
    EXPOSED,
    HIDDEN_OPS,
    STATUS,
    error_body,
    openapi_document,
    request_schema,
    status_of,
)
from palace_client.mcp.schema import op_property
from palaced.wire import errors as E
from palaced.wire.specs import SPECS

# The statuses a caller branches on, by error name (the table must keep them).
EXPECTED = {
    "INVALID_ARGS": 400, "UNKNOWN_OP": 404, "FRAME_TOO_LARGE": 413, "BAD_FRAME": 400,
    "PALACE_NOT_FOUND": 404, "PALACE_EXISTS": 409, "PALACE_LOCKED": 409,
    "INVALID_PALACE_NAME": 400, "FORBIDDEN": 403, "MEMORY_NOT_FOUND": 404,
    "FACT_NOT_FOUND": 404, "MEMOIR_NOT_FOUND": 404, "CONCEPT_NOT_FOUND": 404,
    "MEMOIR_EXISTS": 409, "TEXT_TOO_LARGE": 413, "INVALID_CONTENT": 422, "BUSY": 503,
    "TIMEOUT": 504, "SHUTTING_DOWN": 503, "INTERNAL": 500, "EMBEDDER_UNAVAILABLE": 503,
    "STORAGE_FULL": 507, "DAEMON_UNREACHABLE": 502, "DAEMON_START_FAILED": 502,
    "USAGE_ERROR": 400, "UNAUTHORIZED": 401, "REQUEST_REFUSED": 403,
}


def test_every_error_class_has_a_status() -> None:
    classes = E.error_classes()
    seen = {cls.name: status_of(cls()) for cls in classes.values()}
    assert set(EXPECTED) <= set(seen)
    assert {name: seen[name] for name in EXPECTED} == EXPECTED
    assert all(400 <= status < 600 for status in seen.values())
    assert set(STATUS) <= {E.PalaceError, *classes.values(), E.ProtocolError,
                           E.RegistryError, E.ContentError, E.LoadError, E.ClientError}


def test_error_body_is_the_typed_error() -> None:
    body = error_body(E.MemoryNotFound("no drawer 7", details={"id": 7}))
    assert body == {"error": {"code": 300, "name": "MEMORY_NOT_FOUND",
                              "message": "no drawer 7", "retryable": False,
                              "details": {"id": 7}}}


def test_exposed_ops_are_the_specs_but_the_daemon_internal_ones() -> None:
    assert HIDDEN_OPS <= set(SPECS)
    assert set(EXPOSED) == set(SPECS) - {"daemon.stop", "model.load", "model.use",
                                         "model.check"}


@pytest.mark.parametrize("op", sorted(EXPOSED))
def test_request_schema_is_derived_from_the_spec(op: str) -> None:
    schema = request_schema(SPECS[op])
    Draft202012Validator.check_schema(schema)
    args = schema["properties"]["args"]
    assert args["additionalProperties"] is False
    for name in SPECS[op].args:
        assert args["properties"][name] == op_property(op, name)
    assert ("palace" in schema["properties"]) == (SPECS[op].palace != "none")


def test_openapi_document_shape() -> None:
    doc = openapi_document()
    assert doc["openapi"] == "3.1.0" and doc["components"]["securitySchemes"]
    assert len(doc["paths"]) == len(EXPOSED)
    ids = [item["post"]["operationId"] for item in doc["paths"].values()]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("host", "ok"), [
    ("127.0.0.1:8765", True), ("localhost:8765", True), ("[::1]:8765", True),
    ("LOCALHOST:8765", True), ("127.0.0.1", False), ("127.0.0.1:8766", False),
    ("evil.example:8765", False), (None, False), ("127.0.0.1:8765.evil", False)])
def test_host_check(host: str | None, ok: bool) -> None:
    if ok:
        security.check_host(host, 8765)
    else:
        with pytest.raises(E.RequestRefused):
            security.check_host(host, 8765)


def test_authentication_and_csrf() -> None:
    keys = security.Keys()
    bearer = {"authorization": f"Bearer {keys.secret}"}
    assert security.authenticate(bearer, {}, keys) == "bearer"
    assert security.authenticate({}, {security.COOKIE: keys.session}, keys) == "cookie"
    for headers, cookies in (({}, {}), ({"authorization": "Bearer x"}, {}),
                             ({}, {security.COOKIE: keys.secret})):
        with pytest.raises(E.Unauthorized):
            security.authenticate(headers, cookies, keys)
    assert keys.session != keys.secret != keys.csrf and security.Keys().secret != keys.secret
    own = "http://127.0.0.1:8765"
    security.check_origin("POST", {"origin": own}, "bearer", keys, 8765)
    security.check_origin("GET", {}, "cookie", keys, 8765)  # reads by cookie need no header
    security.check_origin("POST", {"x-palace-csrf": keys.csrf}, "cookie", keys, 8765)
    refused: list[tuple[dict[str, str], str]] = [
        ({"origin": "http://evil.example"}, "bearer"), ({}, "cookie"),
        ({"x-palace-csrf": keys.session}, "cookie"),
        ({"x-palace-csrf": keys.csrf, "origin": "null"}, "cookie")]
    for headers, how in refused:
        with pytest.raises(E.RequestRefused):
            security.check_origin("POST", headers, how, keys, 8765)


@pytest.mark.parametrize(("headers", "agent"), [
    ({"x-palace-agent": "ci:nightly"}, "ci:nightly"), ({"user-agent": "curl/8.5.0"}, "http:curl"),
    ({"user-agent": "Mozilla/5.0 (X11)"}, "http:Mozilla"), ({}, "http")])
def test_agent_of(headers: dict[str, Any], agent: str) -> None:
    assert security.agent_of(headers) == agent


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.com", ""])
def test_only_loopback_is_served(host: str) -> None:
    with pytest.raises(E.UsageError, match="ssh -L"):
        security.loopback_host(host)
    assert security.loopback_host("localhost") == "127.0.0.1"
    assert security.loopback_host("::1") == "::1"
