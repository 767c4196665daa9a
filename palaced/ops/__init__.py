"""The ops the daemon serves: ``table`` binds each spec to its handler and dispatches;
handlers live by concern (``daemon_ops``, ``palaces``, ``drawers``, ``graph``, ``upkeep``)
and reach the daemon only through ``context.OpContext``; ``fields`` holds their shared checks.
"""
