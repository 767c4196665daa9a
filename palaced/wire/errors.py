"""The one exception tree of palace, with stable numeric codes.

Leaf module (stdlib and the leaf ``excerpts``): the client imports it to rebuild typed
errors from error envelopes (``protocol.decode_error``). Codes are grouped by hundreds and
are part of the wire contract; never renumber.
"""

from __future__ import annotations

from typing import Any, ClassVar

# Error texts echo input only as bounded excerpts (re-exported: callers quote from here).
from palaced.wire.excerpts import MAX_DETAIL_CHARS as MAX_DETAIL_CHARS
from palaced.wire.excerpts import MAX_MESSAGE_CHARS as MAX_MESSAGE_CHARS
from palaced.wire.excerpts import QUOTE_CHARS as QUOTE_CHARS
from palaced.wire.excerpts import bounded as bounded
from palaced.wire.excerpts import clip as clip
from palaced.wire.excerpts import quote as quote


class PalaceError(Exception):
    """Root of every error palace reports; carries a stable code and name."""

    code: ClassVar[int] = 500
    name: ClassVar[str] = "INTERNAL"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str = "", *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message or self.name)
        self.message = message or self.name
        self.details: dict[str, Any] = dict(details or {})

    def to_wire(self) -> dict[str, Any]:
        """Return the error map of a response envelope.

        The message and details are cut to bounded sizes here as a last line of defence:
        messages quote input through ``quote`` already, but no error may grow with its input.
        """
        return {
            "code": self.code,
            "name": self.name,
            "message": clip(self.message, MAX_MESSAGE_CHARS),
            "retryable": self.retryable,
            "details": bounded(self.details),
        }


# 1xx protocol
class ProtocolError(PalaceError):
    """The bytes or envelope on the wire are not valid protocol."""

    code = 100
    name = "BAD_FRAME"


class BadFrame(ProtocolError):
    """A frame could not be decoded as msgpack or is not a request map."""

    code = 100
    name = "BAD_FRAME"


class FrameTooLarge(ProtocolError):
    """A frame's length prefix exceeds the negotiated maximum."""

    code = 101
    name = "FRAME_TOO_LARGE"


class UnsupportedProtocol(ProtocolError):
    """The peer speaks a protocol version this side does not."""

    code = 102
    name = "UNSUPPORTED_PROTOCOL"


class HandshakeRequired(ProtocolError):
    """A request arrived before the daemon.hello handshake."""

    code = 103
    name = "HANDSHAKE_REQUIRED"


class UnknownOp(ProtocolError):
    """The requested op is not one the daemon serves."""

    code = 104
    name = "UNKNOWN_OP"


class InvalidArgs(ProtocolError):
    """Arguments are missing, of the wrong type, out of bounds or unknown."""

    code = 105
    name = "INVALID_ARGS"


# 2xx palace / registry
class RegistryError(PalaceError):
    """A palace-level problem."""

    code = 200
    name = "PALACE_NOT_FOUND"


class PalaceNotFound(RegistryError):
    """No palace of that name exists."""

    code = 200
    name = "PALACE_NOT_FOUND"


class PalaceExists(RegistryError):
    """A palace of that name already exists."""

    code = 201
    name = "PALACE_EXISTS"


class PalaceLocked(RegistryError):
    """Another process holds the palace's lock file."""

    code = 202
    name = "PALACE_LOCKED"


class EmbedderMismatch(RegistryError):
    """A team palace holds another model's vectors: writes refused, recall keyword-only."""

    code = 203
    name = "EMBEDDER_MISMATCH"


class SchemaTooNew(RegistryError):
    """The palace database was written by a newer palace version."""

    code = 204
    name = "SCHEMA_TOO_NEW"


class InvalidPalaceName(RegistryError):
    """A palace name is not lowercase kebab-case of 1-64 characters."""

    code = 205
    name = "INVALID_PALACE_NAME"


class Forbidden(RegistryError):
    """The palace's policy does not let this agent do that (see `palace policy show`)."""

    code = 208
    name = "FORBIDDEN"


class PalaceNotEmpty(PalaceExists):
    """A restore's target palace already holds memories (restore into a new palace)."""

    code = 206
    name = "PALACE_NOT_EMPTY"


class BackupInvalid(RegistryError):
    """A backup failed verification: its manifest, a file's checksum, or its database."""

    code = 207
    name = "BACKUP_INVALID"


class TeamUnsupported(RegistryError):
    """An op on a local palace's files asked of a team palace (PostgreSQL's tools do it)."""

    code = 209
    name = "TEAM_UNSUPPORTED"


# 3xx content
class ContentError(PalaceError):
    """A problem with a memory or fact."""

    code = 300
    name = "MEMORY_NOT_FOUND"


class MemoryNotFound(ContentError):
    """No drawer with that id exists in the palace."""

    code = 300
    name = "MEMORY_NOT_FOUND"


class TextTooLarge(ContentError):
    """A text exceeds the configured maximum size."""

    code = 301
    name = "TEXT_TOO_LARGE"


class FactNotFound(ContentError):
    """No fact with that id exists in the palace."""

    code = 302
    name = "FACT_NOT_FOUND"


class InvalidContent(ContentError):
    """Content is not acceptable (empty text, NUL bytes, bad dates, self-links)."""

    code = 303
    name = "INVALID_CONTENT"


class MemoirNotFound(ContentError):
    """No memoir of that name exists in the palace."""

    code = 304
    name = "MEMOIR_NOT_FOUND"


class ConceptNotFound(ContentError):
    """No concept of that name exists in the memoir."""

    code = 305
    name = "CONCEPT_NOT_FOUND"


class MemoirExists(ContentError):
    """A memoir of that name already exists in the palace."""

    code = 306
    name = "MEMOIR_EXISTS"


class ConceptExists(ContentError):
    """The memoir already has a concept of that name with another definition; refine it."""

    code = 307
    name = "CONCEPT_EXISTS"


class SourceUnreadable(ContentError):
    """A file the daemon was asked to read is missing, not a regular file, or not readable."""

    code = 308
    name = "SOURCE_UNREADABLE"


# 4xx load / time
class LoadError(PalaceError):
    """The daemon cannot serve the request right now."""

    code = 400
    name = "BUSY"
    retryable = True


class Busy(LoadError):
    """Too many requests in flight; retry later."""

    code = 400
    name = "BUSY"


class Timeout(LoadError):
    """The request ran past its deadline."""

    code = 401
    name = "TIMEOUT"


class ShuttingDown(LoadError):
    """The daemon is shutting down."""

    code = 402
    name = "SHUTTING_DOWN"


class StoreUnavailable(LoadError):
    """A team palace's PostgreSQL server is unreachable or too slow; retry (it reconnects)."""

    code = 403
    name = "STORE_UNAVAILABLE"


# 5xx internal
class InternalError(PalaceError):
    """An unexpected failure; the daemon log has the traceback under the error id."""

    code = 500
    name = "INTERNAL"


class StorageError(InternalError):
    """SQLite reported an error."""

    code = 501
    name = "STORAGE_ERROR"


class StorageFull(StorageError):
    """The palace's storage is full: nothing was written; free some space, then retry."""

    code = 505
    name = "STORAGE_FULL"


class StorageReadOnly(StorageError):
    """The palace's storage cannot be written (a read-only mount or permissions): nothing
    was written; make it writable, then retry."""

    code = 506
    name = "STORAGE_READ_ONLY"


class StorageCorrupt(StorageError):
    """The palace's database is corrupt: restore it from a backup or delete the palace.
    Writes to it are refused until then; reads are tried."""

    code = 507
    name = "STORAGE_CORRUPT"


class IndexError_(InternalError):
    """The vector index failed."""

    code = 502
    name = "INDEX_ERROR"


class EmbedderUnavailable(InternalError):
    """No embedding model is loaded (keyword-only mode)."""

    code = 503
    name = "EMBEDDER_UNAVAILABLE"
    retryable = True


class UnsafePath(InternalError):
    """A path palace must own is unsafe: a symlink, owned by another uid, or open to others."""

    code = 504
    name = "UNSAFE_PATH"


# Client-side only: never sent by the daemon.
class ClientError(PalaceError):
    """A failure on the client side of the socket."""

    code = 600
    name = "CLIENT_ERROR"


class DaemonUnreachable(ClientError):
    """The daemon is not running and could not be started or reached."""

    code = 601
    name = "DAEMON_UNREACHABLE"
    retryable = True


class OutcomeUnknown(ClientError):
    """The connection broke after a non-idempotent request was sent: it may or may not have
    been applied. Not retryable blindly: look at the state (get, list, timeline) first.
    """

    code = 602
    name = "OUTCOME_UNKNOWN"


class UntrustedDaemon(ClientError):
    """The process serving the socket runs as another uid; nothing was sent to it."""

    code = 603
    name = "UNTRUSTED_DAEMON"


class DataDirMismatch(ClientError):
    """The daemon on the socket serves another data directory than this client resolved (a
    different ``HOME`` or ``PALACE_HOME``): using it would read and write another store."""

    code = 604
    name = "DATA_DIR_MISMATCH"


class DaemonStartFailed(DaemonUnreachable):
    """The daemon a client started exited before it answered (bad config, unsafe path...);
    ``details`` carry its exit status and stderr. Fix what the message says, then retry."""

    code = 605
    name = "DAEMON_START_FAILED"
    retryable = False


class UsageError(ClientError):
    """The command line is not valid: an unknown option, a missing argument, a bad value."""

    code = 606
    name = "USAGE_ERROR"


class Unauthorized(ClientError):
    """An HTTP API request (``palace serve``) without the server's per-launch secret (a
    Bearer token or the session cookie ``/login`` sets), or with a wrong one."""

    code = 607
    name = "UNAUTHORIZED"


class RequestRefused(ClientError):
    """The HTTP API (``palace serve``) refused a request another site or host could have
    made: a foreign ``Host`` (DNS rebinding) or ``Origin``, or a cookie-authenticated
    request without the CSRF header."""

    code = 608
    name = "REQUEST_REFUSED"


def error_classes() -> dict[int, type[PalaceError]]:
    """Each code's most specific class of this module (a subclass wins over its base), found
    anew on each call (``protocol`` keeps its own table)."""
    table: dict[int, type[PalaceError]] = {}
    stack: list[type[PalaceError]] = [PalaceError]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        existing = table.get(cls.code)
        if cls.__module__ == __name__ and (existing is None or issubclass(cls, existing)):
            table[cls.code] = cls
    return table
