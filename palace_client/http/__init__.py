"""``palace serve``: a local HTTP API for the ops, a client of the daemon like the CLI.

``openapi`` derives the exposed ops, their OpenAPI 3.1 document and the HTTP status of every
typed error from ``palaced.wire.specs`` and ``palaced.wire.errors``; ``security`` holds the
per-launch secret, the session cookie, the Host/Origin/CSRF checks; ``app`` is the Starlette
application (requests go to palaced over its Unix socket through ``palace_client.Client``);
``command`` is the typer command that binds loopback and runs uvicorn. docs/http.md.
"""
