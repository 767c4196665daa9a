#!/usr/bin/env bash
# Real MCP clients against the palace bridge:
#   1. the MCP Inspector CLI (npx @modelcontextprotocol/inspector --cli): tools/list, then a
#      remember and a recall through tools/call; then tools/list and the recall again over
#      Streamable HTTP (`palace serve`'s /mcp with the bearer secret);
#   2. Claude Code (npm @anthropic-ai/claude-code, installed into a scratch dir) in a scratch
#      HOME whose project .mcp.json was written by `palace init`: `claude mcp list` must say
#      "Connected".
# Everything (npm installs, HOME, palace data, daemon) lives in one scratch dir that is
# removed at the end; the daemon started for it is stopped.
# Usage: bench/mcp_clients.sh            (needs node/npm with registry access)
set -euo pipefail

PY=$(python3 -c 'import sys; print(sys.executable)')
SCRATCH=$(mktemp -d /tmp/palace-mcpc.XXXXXX)
export PALACE_HOME="$SCRATCH/ph"
export npm_config_cache="$SCRATCH/npm-cache"
export npm_config_update_notifier=false
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODEL="$REPO/../shared/models/all-MiniLM-L6-v2-onnx-int8"
[ -d "$MODEL" ] && export PALACE_EMBED_MODEL_PATH="$MODEL"
PALACE=("$PY" -m palace_client)
status=0

cleanup() {
    "$PY" - <<'EOF' || true
from palace_client import Client
from palaced.wire.errors import PalaceError
try:
    Client(autostart=False).stop_daemon()
except (PalaceError, OSError):
    pass
EOF
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

echo "== versions"
echo "node $(node --version), npm $(npm --version), python $("$PY" --version 2>&1 | cut -d' ' -f2)"
echo "inspector $(npm view @modelcontextprotocol/inspector version 2>/dev/null)"

echo
echo "== MCP Inspector CLI: tools/list"
INSPECT=(npx -y @modelcontextprotocol/inspector --cli
         -e "PALACE_HOME=$PALACE_HOME" -e "PALACE_EMBED_MODEL_PATH=${PALACE_EMBED_MODEL_PATH:-}"
         "$PY" -m palace_client mcp --palace bench)
out=$("${INSPECT[@]}" --method tools/list)
echo "$out" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("tools:", ", ".join(t["name"] for t in d["tools"]))'

echo
echo "== MCP Inspector CLI: tools/call remember + recall"
"${INSPECT[@]}" --method tools/call --tool-name remember \
    --tool-arg "text=The bench palace was exercised by the MCP inspector" --tool-arg room=bench \
    | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["content"][0]["text"]); sys.exit(d.get("isError", False))'
"${INSPECT[@]}" --method tools/call --tool-name recall --tool-arg "query=who exercised the bench palace" \
    | "$PY" -c 'import json,sys; d=json.load(sys.stdin); t=d["content"][0]["text"]; print(t); sys.exit(0 if "MCP inspector" in t else 1)' \
    || { echo "recall via inspector did not find the drawer"; status=1; }

echo
echo "== MCP Inspector CLI over Streamable HTTP (palace serve's /mcp, bearer secret)"
"${PALACE[@]}" serve --port 0 --json > "$SCRATCH/serve.json" 2> "$SCRATCH/serve.err" &
SERVE=$!
for _ in $(seq 100); do [ -s "$SCRATCH/serve.json" ] && break; sleep 0.1; done
MCP_URL=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["mcp"])' "$SCRATCH/serve.json")
SECRET=$("$PY" -c 'import json,sys; print(open(json.load(open(sys.argv[1]))["secret_file"]).read().strip())' "$SCRATCH/serve.json")
HTTP=(npx -y "@modelcontextprotocol/inspector@${INSPECTOR_VERSION:-2.12.0}" --cli "$MCP_URL?palace=bench" --transport http
      --header "Authorization: Bearer $SECRET")
"${HTTP[@]}" --method tools/list \
    | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("tools:", ", ".join(t["name"] for t in d["tools"]))'
"${HTTP[@]}" --method tools/call --tool-name recall --tool-arg "query=who exercised the bench palace" \
    | "$PY" -c 'import json,sys; d=json.load(sys.stdin); t=d["content"][0]["text"]; print(t); sys.exit(0 if "MCP inspector" in t else 1)' \
    || { echo "recall via inspector over HTTP did not find the drawer"; status=1; }
kill "$SERVE" 2>/dev/null || true
wait "$SERVE" 2>/dev/null || true

echo
echo "== Claude Code: claude mcp list"
npm install --silent --no-audit --no-fund --prefix "$SCRATCH/claude" @anthropic-ai/claude-code >/dev/null
CLAUDE="$SCRATCH/claude/node_modules/.bin/claude"
echo "claude-code $("$CLAUDE" --version 2>/dev/null | head -1)"
mkdir -p "$SCRATCH/home"
# A real repository: Claude Code ignores .claude/settings.local.json (where the approval lives)
# when git cannot tell that the file is untracked.
git init -q "$SCRATCH/proj"
HOME="$SCRATCH/home" "${PALACE[@]}" init --agent claude --scope project \
    --project-dir "$SCRATCH/proj" --palace bench
echo "--- .mcp.json:"
cat "$SCRATCH/proj/.mcp.json"
listing=$(cd "$SCRATCH/proj" && HOME="$SCRATCH/home" PALACE_HOME="$PALACE_HOME" \
          timeout 120 "$CLAUDE" mcp list 2>&1) || true
echo "$listing"
if echo "$listing" | grep -q "palace.*Connected"; then
    echo "claude mcp list: palace Connected"
else
    echo "claude mcp list: palace NOT connected"
    status=1
fi
exit $status
