"""MemPalace's side of ``bench/mempalace_compare.py``; runs inside MemPalace's own virtualenv.

Never imported by palace: ``mempalace_compare.py`` runs it with the MemPalace venv's Python,
``HOME`` a scratch directory (chromadb's model cache copied there), offline. Input: a JSON
file ``{"drawers": [{"text", "wing", "room"}...], "queries": [...], "single": N}``; output:
one JSON document in the file named second (importing its MCP server
redirects stdout).

MemPalace's own code paths, as its MCP server and miners call them:

* bulk ingest: the collection the MCP server opens (``mcp_server._get_collection``),
  ``collection.upsert`` in batches of ``convo_miner.DRAWER_UPSERT_BATCH_SIZE`` with the
  metadata a conversation mine writes (the miner's path, minus reading files and chunking);
* single ingest: ``tool_add_drawer`` (the MCP ``mempalace_add_drawer`` tool), one call each;
* search: ``tool_search(query, limit=10)`` (the MCP ``mempalace_search`` tool, which calls
  ``searcher.search_memories``: vector candidates, BM25 over them, closet boosts).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))]


def main() -> None:
    spec = json.load(open(sys.argv[1], encoding="utf-8"))
    t_import = time.perf_counter()
    import mempalace.mcp_server as server  # its fragments (tools_*.py) are exec'd into it
    from mempalace import convo_miner
    from mempalace.version import __version__
    out: dict[str, object] = {"version": __version__,
                              "import_s": round(time.perf_counter() - t_import, 2)}
    col = server._get_collection(create=True)
    if col is None:
        raise SystemExit("MemPalace opened no collection")
    batch = int(getattr(convo_miner, "DRAWER_UPSERT_BATCH_SIZE", 100))
    out["upsert_batch"] = batch
    # The embedding model's first use (session build) outside the clock, as palace's warm
    # daemon has it loaded.
    col.upsert(ids=["warm"], documents=["warm up"], metadatas=[{"wing": "w", "room": "r"}])
    col.delete(ids=["warm"])
    drawers = spec["drawers"]
    t0 = time.perf_counter()
    for s in range(0, len(drawers), batch):
        part = drawers[s:s + batch]
        col.upsert(
            ids=[hashlib.sha256(f"{s + i}:{d['text']}".encode()).hexdigest()[:24]
                 for i, d in enumerate(part)],
            documents=[d["text"] for d in part],
            metadatas=[{"wing": d["wing"], "room": d["room"], "source_file": "bench",
                        "chunk_index": s + i, "added_by": "bench", "ingest_mode": "convos"}
                       for i, d in enumerate(part)])
        print(f"mempalace: {s + len(part)} drawers in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    ingest_s = time.perf_counter() - t0
    out["ingest_drawers_per_s"] = round(len(drawers) / ingest_s, 1)
    out["count"] = col.count()
    lat = []
    for i in range(spec["single"]):
        d = drawers[i]
        t = time.perf_counter()
        res = server.tool_add_drawer(d["wing"], d["room"], f"{d['text']} (single {i})")
        lat.append((time.perf_counter() - t) * 1000)
        if not res.get("success"):
            raise SystemExit(f"tool_add_drawer failed: {res}")
    out["add_drawer_ms_p50"] = round(statistics.median(lat), 2) if lat else None
    for q in spec["queries"][:5]:  # warm-up
        server.tool_search(q, limit=10)
    lat = []
    hits = []
    for q in spec["queries"]:
        t = time.perf_counter()
        res = server.tool_search(q, limit=10)
        lat.append((time.perf_counter() - t) * 1000)
        if "error" in res:
            raise SystemExit(f"tool_search failed: {res}")
        hits.append(len(res.get("results", [])))
    out["recall_ms_p50"] = round(statistics.median(lat), 2)
    out["recall_ms_p95"] = round(pct(lat, 95), 2)
    out["results_per_query_median"] = statistics.median(hits)
    with open(sys.argv[2], "w", encoding="utf-8") as f:  # its MCP server takes stdout
        json.dump(out, f)


if __name__ == "__main__":
    main()
