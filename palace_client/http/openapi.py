"""What the HTTP API exposes, derived from the op specs: the ops, their OpenAPI 3.1 document
and the HTTP status of every typed error.

Nothing here is written per op: an op's request schema is its ``palaced.wire.specs.OpSpec``
stated as JSON Schema by ``palace_client.mcp.schema.op_property`` (the MCP bridge's derivation:
same types, bounds, lengths and defaults as the daemon validates), and an error's status comes
from its class in ``palaced.wire.errors`` (the most specific class of ``STATUS`` it inherits).
"""

from __future__ import annotations

from typing import Any

from palace_client.mcp.schema import JSON_TYPES, op_property
from palaced import __version__
from palaced.wire import errors as E
from palaced.wire.specs import SPECS, OpSpec

API_PREFIX = "/api/v1"
OP_PATH = API_PREFIX + "/ops/{op}"
# Ops a CLI user may call that the HTTP API does not serve. ``daemon.stop`` would stop the
# daemon every agent of the user shares (`palace daemon stop` is a person's act at a
# terminal); ``model.load`` and ``model.check`` are the CLI's steps after it installs model
# files on disk, which an HTTP caller cannot do; ``model.use`` rewrites the user's config file
# and re-embeds every palace (a person's choice, as stopping is). The handshake (``hello``) is
# the transport's, not an op of SPECS.
HIDDEN_OPS = frozenset({"daemon.stop", "model.load", "model.use", "model.check"})
EXPOSED: dict[str, OpSpec] = {name: spec for name, spec in SPECS.items()
                              if name not in HIDDEN_OPS}

# The HTTP status of each error class; a class not listed takes its nearest listed base's.
STATUS: dict[type[E.PalaceError], int] = {
    E.PalaceError: 500,
    E.ProtocolError: 400,
    E.UnknownOp: 404,
    E.FrameTooLarge: 413,
    E.RegistryError: 409,  # the palace's state does not allow it (locked, mismatch, too new)
    E.PalaceNotFound: 404,
    E.InvalidPalaceName: 400,
    E.BackupInvalid: 422,
    E.TeamUnsupported: 422,
    E.Forbidden: 403,
    E.ContentError: 422,
    E.MemoryNotFound: 404,
    E.FactNotFound: 404,
    E.MemoirNotFound: 404,
    E.ConceptNotFound: 404,
    E.MemoirExists: 409,
    E.ConceptExists: 409,
    E.TextTooLarge: 413,
    E.LoadError: 503,
    E.Timeout: 504,
    E.InternalError: 500,
    E.EmbedderUnavailable: 503,
    E.StorageFull: 507,
    E.ClientError: 500,
    E.DaemonUnreachable: 502,  # palace serve is a gateway to palaced
    E.OutcomeUnknown: 502,
    E.UntrustedDaemon: 502,
    E.DataDirMismatch: 502,
    E.UsageError: 400,
    E.Unauthorized: 401,
    E.RequestRefused: 403,
}


def status_of(exc: E.PalaceError) -> int:
    """The HTTP status of ``exc``: that of the first class of its MRO listed in ``STATUS``."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_body(exc: E.PalaceError) -> dict[str, Any]:
    """The JSON body of an error response: the daemon's typed error, as the CLI prints it."""
    wire = exc.to_wire()
    return {"error": {key: wire[key] for key in ("code", "name", "message", "retryable",
                                                 "details")}}


def _arg_schema(op: str, arg: str) -> dict[str, Any]:
    """The JSON Schema of one argument (an unbounded ``{}`` for a kind JSON cannot type)."""
    kind = SPECS[op].args[arg].kind
    if all(member in JSON_TYPES for member in kind.split("|")):
        return op_property(op, arg)
    return {"description": SPECS[op].args[arg].help} if SPECS[op].args[arg].help else {}


def request_schema(spec: OpSpec) -> dict[str, Any]:
    """The JSON Schema of the body of ``POST /api/v1/ops/<op>``: ``{"palace", "args"}``."""
    args: dict[str, Any] = {
        "type": "object", "additionalProperties": False,
        "properties": {name: _arg_schema(spec.name, name) for name in spec.args}}
    required = [name for name, arg in spec.args.items() if arg.required]
    if required:
        args["required"] = required
    properties: dict[str, Any] = {"args": args}
    body: dict[str, Any] = {"type": "object", "additionalProperties": False,
                            "properties": properties}
    if spec.palace != "none":
        properties["palace"] = {"type": "string", "description": "the palace's name"}
    if spec.palace == "required":
        body["required"] = ["palace"]
    if required:
        body.setdefault("required", []).append("args")
    return body


_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["code", "name", "message", "retryable", "details"],
        "properties": {"code": {"type": "integer"}, "name": {"type": "string"},
                       "message": {"type": "string"}, "retryable": {"type": "boolean"},
                       "details": {"type": "object"}}}}}


def _responses() -> dict[str, Any]:
    """An op's answers: its result (200), or a typed error with one of ``STATUS``'s codes."""
    error = {"description": "a typed error (docs/protocol.md#errors)",
             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    out: dict[str, Any] = {"200": {
        "description": "the op's result",
        "content": {"application/json": {"schema": {"type": "object"}}}}}
    for status in sorted(set(STATUS.values())):
        out[str(status)] = error
    return out


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API: one ``POST`` path per exposed op."""
    paths: dict[str, Any] = {}
    for name, spec in sorted(EXPOSED.items()):
        paths[OP_PATH.replace("{op}", name)] = {"post": {
            "operationId": name.replace(".", "_"),
            "summary": spec.doc.split("\n")[0] if spec.doc else name,
            "tags": [name.split(".")[0]],
            "x-palace-read-only": spec.read_only,
            "x-palace-permission": spec.permission or None,
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": request_schema(spec)}}},
            "responses": _responses()}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "palace local HTTP API", "version": __version__,
                 "description": "Every op of palaced (docs/http.md), derived from its op specs."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": {"Error": _ERROR_SCHEMA},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "the per-launch secret (its file: docs/http.md)"},
                "session": {"type": "apiKey", "in": "cookie", "name": "palace_session",
                            "description": "set by GET /login?token=; writes need the "
                                           "X-Palace-CSRF header too"}}},
        "security": [{"bearer": []}, {"session": []}],
    }
