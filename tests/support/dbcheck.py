"""The palace file checks of ``bench/_dbcheck.py`` (one definition for the bench checks and
the tests): ``integrity``, ``texts``, ``index_problems``, ``read_only``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_dbcheck", Path(__file__).resolve().parents[2] / "bench" / "_dbcheck.py")
assert _spec is not None and _spec.loader is not None
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

integrity = _mod.integrity
texts = _mod.texts
index_problems = _mod.index_problems
read_only = _mod.read_only
