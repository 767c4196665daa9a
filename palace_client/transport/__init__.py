"""The socket: connections and their deadlines, starting the daemon, who serves the socket.

Layers: docs/development.md."""
