"""Starting is cheap: `import kvreplay` and `kvreplay --version` import no numpy, a command imports
its own family of commands only, and the command table names every family's commands (the
timings themselves are in benchmarks/startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from kvreplay import cli

PROBE = "; import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('kvreplay', 'numpy'))))"


def modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_kvreplay_imports_no_numpy():
    assert modules_after("import kvreplay") == {"kvreplay", "kvreplay.errors", "kvreplay.version"}


FRAME = {"kvreplay.cli.parser", "kvreplay.cli.progress"}  # argument errors, progress display: no numpy, no command


def test_version_imports_no_numpy_and_no_command():
    loaded = modules_after("from kvreplay.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass")
    assert "numpy" not in loaded and {m for m in loaded if m.startswith("kvreplay.cli.")} <= FRAME, sorted(loaded)


def test_a_command_imports_its_family_only(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"input_length": 8, "hash_ids": [1, 2]}\n')
    loaded = modules_after(f"from kvreplay.cli import main; main(['run', {str(trace)!r}, '--capacity', '4'])")
    # (cli.warmup and cli.sessions: the --warmup / --cold-start and closed-loop flags the replay family's
    # report, serving and plan share; neither imports beyond argparse and errors)
    assert {m for m in loaded if m.startswith("kvreplay.cli.")} <= {"kvreplay.cli.replay", "kvreplay.cli.common",
                                                                      "kvreplay.cli.warmup", "kvreplay.cli.sessions",
                                                                      *FRAME}
    assert not any(m.startswith(("kvreplay.serving.", "kvreplay.policies.lru")) for m in loaded), sorted(loaded)


def test_the_command_table_is_every_familys():
    declared = {name: family for family in cli.FAMILIES for name in cli.family(family).COMMANDS}
    assert declared == cli.FAMILY
