"""One writer process of the crash storm (``_storm.py``): writes unique drawers until told to
stop, and records every text before it is sent and every acknowledgement after it arrives.

    python bench/_storm_writer.py SOCKET PALACE INDEX CONTROL_DIR SEED

Its own ``palace_client.Client`` (auto-start on, as a real client: after a kill -9 the
writers race to start the next daemon). The journal ``CONTROL_DIR/w<INDEX>.jsonl`` gets one
JSON line per event, written unbuffered so the driver sees it at once:
``{"s": [texts]}`` before a request, ``{"a": [ids], "t": [texts]}`` for an acknowledged
one, ``{"u": [texts], "e": name}`` for one whose answer was an error or never came.
While ``CONTROL_DIR/pause`` exists the writer idles and says so in
``CONTROL_DIR/paused.<INDEX>``; ``CONTROL_DIR/stop`` ends it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from palace_client import Client
from palaced.wire.errors import PalaceError

PLACES = ("river", "forest", "harbor", "mountain", "meadow", "glacier", "desert", "marsh")
THINGS = ("otters", "herons", "pumps", "bridges", "lanterns", "orchards", "turbines", "ferries")
VERBS = ("inspected", "repaired", "counted", "photographed", "surveyed", "cleaned")


def main() -> int:
    sock, palace, idx, control, seed = (Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                        Path(sys.argv[4]), int(sys.argv[5]))
    rnd = random.Random(seed)
    journal = os.open(control / f"w{idx}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    paused = control / f"paused.{idx}"
    serial = 0

    def note(event: dict[str, object]) -> None:
        os.write(journal, (json.dumps(event) + "\n").encode())

    def text() -> str:
        nonlocal serial
        serial += 1
        return (f"sw{idx}x{serial}: the {rnd.choice(THINGS)} near the {rnd.choice(PLACES)} "
                f"were {rnd.choice(VERBS)} on day {rnd.randrange(1, 365)}")

    client = Client(sock, autostart=True, client_name=f"storm-{idx}")
    try:
        while not (control / "stop").exists():
            if (control / "pause").exists():
                paused.touch()
                time.sleep(0.02)
                continue
            paused.unlink(missing_ok=True)
            batch = [text() for _ in range(rnd.randrange(2, 6))] if rnd.random() < 0.2 else [
                text()]
            note({"s": batch})
            try:
                if len(batch) == 1:
                    ids = [client.remember(palace, batch[0], room=f"r{idx % 4}", dedup=False)]
                else:
                    ids = client.remember_many(palace, [{"text": t, "room": f"r{idx % 4}"}
                                                        for t in batch])
            except (PalaceError, OSError) as exc:
                note({"u": batch, "e": getattr(exc, "name", type(exc).__name__)})
                time.sleep(0.05)  # the daemon is down or starting: do not spin
                continue
            note({"a": [int(i) for i in ids], "t": batch})
    finally:
        client.close()
        os.close(journal)
    return 0


if __name__ == "__main__":
    sys.exit(main())
