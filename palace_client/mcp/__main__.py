"""``python -m palace_client.mcp [--palace NAME] [--compact]``: the bridge without the CLI."""

import sys

from palace_client.mcp.stdio import main

sys.exit(main())
