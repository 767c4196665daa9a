"""The HTTP application in process (Starlette's TestClient, a fake daemon pool)."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from palace_client.http.app import ClientPool, build_app
from palace_client.http.security import Keys
from palaced.wire import errors as E


class _Pool(ClientPool):
    def __init__(self, fail: Exception) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]
        self.fail = fail

    def call(self, agent: str, op: str, palace: str | None, args: Any) -> dict[str, Any]:
        raise self.fail


def _post(fail: Exception) -> Any:
    keys = Keys()
    app = build_app(keys, 8765, _Pool(fail))
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        return client.post("/api/v1/ops/palace.list", json={},
                           headers={"Authorization": f"Bearer {keys.secret}"})


def test_an_unexpected_exception_is_still_a_typed_error() -> None:
    response = _post(RuntimeError("boom"))
    assert response.status_code == 500
    assert response.json()["error"]["name"] == "CLIENT_ERROR"
    assert "RuntimeError" in response.json()["error"]["message"]
    assert "access-control-allow-origin" not in response.headers


def test_a_typed_error_of_the_daemon_keeps_its_status() -> None:
    response = _post(E.Busy("all slots taken"))
    assert response.status_code == 503
    assert response.json()["error"] == {"code": 400, "name": "BUSY", "message": "all slots taken",
                                        "retryable": True, "details": {}}
