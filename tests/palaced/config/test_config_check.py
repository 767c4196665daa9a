"""The config file is checked as a whole: unknown sections and keys (with the closest known
name), wrong types and out-of-range values are reported by file and line, and stop the daemon
with the same message `palaced check-config` prints; environment variables override it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from palaced.config import settings as config
from palaced.config.bounds import describe_bound, out_of_bound
from palaced.config.toml_lines import key_lines, line_of
from palaced.wire.errors import InvalidArgs
from palaced.wire.paths import Paths
from tests.conftest import TIKTOKEN_FILE, base_env


def _paths(home: Path) -> Paths:
    return Paths(home, home / "state", home / "config.toml", home / "run",
                 home / "run" / "palaced.sock")


def _problems(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(InvalidArgs) as err:
        config.load(_paths(tmp_path))
    found = err.value.details["problems"]
    lines = [f"{p['line']}: {p['message']}" for p in found]
    assert str(tmp_path / "config.toml") in err.value.message
    assert err.value.message.count("\n") == (0 if len(found) == 1 else len(found))
    return lines


@pytest.mark.parametrize(("text", "want"), [
    ('[embedder]\nthreads = "two"\n',
     ["2: [embedder] threads must be an integer, got the string 'two'"]),
    ("# a comment\n\n[embedder]\nmodle = 'x'\n",
     ["4: unknown key 'modle' in [embedder] (did you mean 'model'?)"]),
    ("[limts]\nmax_frame = 9000\n",
     ["1: unknown section [limts] (did you mean [limits]?); the sections are [embedder], "
      "[tokenizer], [backup], [limits], [trash], [audit], [mcp], [hooks], [upkeep], [team]"]),
    ("[hooks]\nprompt_budget = 0\nprompt_timeout_s = 60\n",
     ["2: [hooks] prompt_budget must be > 0 and <= 4000, got 0",
      "3: [hooks] prompt_timeout_s must be > 0 and <= 10, got 60"]),
    ("[upkeep]\npromote_max = 1.5\nconsolidate_hint_at = -1\n",
     ["2: [upkeep] promote_max must be >= 0 and <= 1, got 1.5",
      "3: [upkeep] consolidate_hint_at must be >= 0 and <= 1000000, got -1"]),
    ("[limits]\nbpe_file = 'x'\n",
     ["2: unknown key 'bpe_file' in [limits] ('bpe_file' belongs in [tokenizer])"]),
    ("threads = 2\n", ["1: 'threads' belongs in the [embedder] section"]),
    ("[embedder]\nallow_download = 1\n",
     ["2: [embedder] allow_download must be true or false, got the integer 1"]),
    ("[limits]\nmax_connections = 0\nrequest_timeout_s = true\nmax_frame = 12\n",
     ["2: [limits] max_connections must be > 0 and <= 100000, got 0",
      "3: [limits] request_timeout_s must be a number, got the boolean true",
      "4: [limits] max_frame must be >= 4096 and <= 1073741824, got 12"]),
    ("[limits]\nidle_close_s = nan\n",
     ["2: [limits] idle_close_s must be >= 0.1 and <= 604800, got nan"]),
    ("[tokenizer]\nbpe_file = ['a']\n",
     ["2: [tokenizer] bpe_file must be a string (a path), got an array"]),
    ("embedder = 3\n", ["1: [embedder] must be a table, got the integer 3"]),
    ('embedder.threads = "x"\n',
     ["1: [embedder] threads must be an integer, got the string 'x'"]),
    ('[embedder]\nmodel = """\nthreads = 1\n"""\nthreads = "y"\n',
     ["5: [embedder] threads must be an integer, got the string 'y'"]),
    ("[embedder]\n[limits]\nx = { y = 1 }\n", ["3: unknown key 'x' in [limits]"]),
])
def test_each_problem_is_reported_with_its_line(tmp_path: Path, text: str,
                                                want: list[str]) -> None:
    assert _problems(tmp_path, text) == want


def test_a_file_that_is_not_toml_says_where(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[limits]\nmax_frame = = 3\n")
    with pytest.raises(InvalidArgs, match=r"cannot read config .*line 2"):
        config.load(_paths(tmp_path))


def test_valid_files_load_with_their_types(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        "[embedder]\nmodel = 'none'\nthreads = 0\nallow_download = false\n"
        "[limits]\nrequest_timeout_s = 30\nreserve_connections = 0\n")
    cfg = config.load(_paths(tmp_path))
    assert cfg.embedder.disabled and cfg.embedder.threads is None
    assert cfg.embedder.allow_download is False
    assert cfg.limits.request_timeout_s == 30.0 and isinstance(cfg.limits.request_timeout_s,
                                                              float)
    assert cfg.limits.reserve_connections == 0


def test_the_environment_overrides_the_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.toml").write_text(
        "[tokenizer]\nbpe_file = '/from/the/file'\n[embedder]\nmodel_path = '/file/model'\n")
    monkeypatch.delenv("PALACE_TIKTOKEN_FILE", raising=False)
    monkeypatch.delenv("PALACE_EMBED_MODEL_PATH", raising=False)
    cfg = config.load(_paths(tmp_path))
    assert cfg.tokenizer_file == Path("/from/the/file")
    assert cfg.embedder.model_path == Path("/file/model")
    monkeypatch.setenv("PALACE_TIKTOKEN_FILE", str(TIKTOKEN_FILE))
    monkeypatch.setenv("PALACE_EMBED_MODEL_PATH", "/env/model")
    cfg = config.load(_paths(tmp_path))
    assert cfg.tokenizer_file == TIKTOKEN_FILE
    assert cfg.embedder.model_path == Path("/env/model")
    monkeypatch.setenv("PALACE_TIKTOKEN_FILE", "")  # empty: no file, like the model path
    assert config.load(_paths(tmp_path)).tokenizer_file is None


def test_key_lines() -> None:
    text = ("a = 1\n[t]\nb = 2  # c = 3\n'q.k' = 4\n[t.u]\nd.e = 5\n[[arr]]\nf = 6\n"
            "s = '''\ng = 7\n'''\nh = 8\n")
    lines = key_lines(text)
    assert lines[("a",)] == 1 and lines[("t",)] == 2 and lines[("t", "b")] == 3
    assert ("t", "c") not in lines and lines[("t", "q.k")] == 4
    assert lines[("t", "u", "d", "e")] == 6 and lines[("arr", "f")] == 8
    assert ("arr", "g") not in lines and lines[("arr", "h")] == 12
    assert line_of(lines, "t", "u", "zz") == 5 and line_of(lines, "nope") is None


def _palaced(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palaced", *args], env=base_env(home),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.daemon
def test_check_config_and_run_refuse_a_bad_file_alike(home: Path) -> None:
    (home / "config.toml").write_text('[embedder]\nthreads = "two"\nthraeds = 2\n')
    checked = _palaced(home, "check-config")
    ran = _palaced(home, "run", "--quiet")
    bare = _palaced(home)  # `palaced` alone is `palaced run`
    for res in (checked, ran, bare):
        assert res.returncode == 2, res.stderr
        assert res.stdout == "" and "Traceback" not in res.stderr
        assert f"{home / 'config.toml'}:2: [embedder] threads must be an integer" in res.stderr
        assert "3: unknown key 'thraeds' in [embedder] (did you mean 'threads'?)" in res.stderr
    assert checked.stderr == ran.stderr == bare.stderr
    (home / "config.toml").write_text("[limits]\nframe_timeout_s = 2\n")
    res = _palaced(home, "check-config")
    assert res.returncode == 0 and json.loads(res.stdout)["limits"]["frame_timeout_s"] == 2.0
    res = _palaced(home, "run", "--log-level", "loud")
    assert res.returncode == 2 and "--log-level must be one of" in res.stderr
    assert "Traceback" not in res.stderr


NUMERIC = [(section, key, spec) for section, keys in config.SCHEMA.items()
           for key, spec in keys.items() if spec.kind in ("integer", "number")]


def test_every_number_has_finite_bounds() -> None:
    """A new numeric key gets both ends too (its metadata: ``config.bounds``)."""
    for section, key, spec in NUMERIC:
        low, high = spec.bound.get("bound"), spec.bound.get("max")
        assert low is not None and high is not None, f"[{section}] {key} has no bounds"
        assert math.isfinite(low) and math.isfinite(high) and low < high, (section, key)
        if spec.default is not None:
            assert not out_of_bound(spec.default, spec.bound), (section, key)


@pytest.mark.parametrize(("section", "key", "spec"), NUMERIC,
                         ids=[f"{s}.{k}" for s, k, _ in NUMERIC])
def test_every_number_refuses_inf_nan_and_absurd_values(tmp_path: Path, section: str,
                                                        key: str, spec: config.Key) -> None:
    bound = describe_bound(spec.bound)
    over = int(spec.bound["max"]) * 10 + 1
    low = spec.bound["bound"]
    under = low - 1 if spec.kind == "integer" else low / 1e300 if low else -1.0
    values = [over, int(under)] if spec.kind == "integer" else [
        "inf", "-inf", "nan", str(float(over)), repr(under)]
    for value in values:
        want = [f"2: [{section}] {key} must be {bound}, got {value!r}"] if spec.kind == (
            "integer") else [f"2: [{section}] {key} must be {bound}, got {float(value)!r}"]
        assert _problems(tmp_path, f"[{section}]\n{key} = {value}\n") == want


@pytest.mark.daemon
def test_check_config_names_the_values_that_wedged_the_daemon(home: Path) -> None:
    """Each of these once passed the check and then broke every request, checkpoint or
    ``forget`` of the daemon it started."""
    (home / "config.toml").write_text(
        "[trash]\nkeep_days = inf\n[audit]\nkeep_days = inf\n[limits]\n"
        "request_timeout_s = inf\nmax_frame = 100000000000000000000\n"
        "frame_timeout_s = 1e-300\n")
    res = _palaced(home, "check-config")
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    lines = [line.removeprefix(f"{home / 'config.toml'}:") for line in res.stderr.splitlines()[1:]]
    assert lines == [
        "2: [trash] keep_days must be >= 0 and <= 36500, got inf",
        "4: [audit] keep_days must be > 0 and <= 36500, got inf",
        "6: [limits] request_timeout_s must be >= 0.1 and <= 604800, got inf",
        "7: [limits] max_frame must be >= 4096 and <= 1073741824, got 100000000000000000000",
        "8: [limits] frame_timeout_s must be >= 0.1 and <= 86400, got 1e-300"]
