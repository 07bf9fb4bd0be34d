"""Argument errors lead with the message and the flag, then one usage line, and exit 2, for every
command; a duration without its unit, or a size or bandwidth in bits, is refused naming the flag."""

from __future__ import annotations

import re

import pytest

from kvreplay.cli import build_parser, common, main
from kvreplay.cli.parser import subcommands
from conftest import DATA

COMMANDS = subcommands(build_parser())
WALK = str(DATA / "walk.jsonl")


def usage_error(capsys, *argv) -> list[str]:
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in argv])
    assert exit_.value.code == 2
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_says_what_is_wrong_first_then_one_usage_line(capsys, command):
    lines = usage_error(capsys, command, "--no-such-flag")
    required = [a for a in COMMANDS[command]._actions if a.required]
    # what is missing first when something required is; otherwise the flag it does not know
    assert lines[0] == f"kvreplay {command}: " + (
        "the following arguments are required: " if required else "unrecognized arguments: --no-such-flag"
    ) + ", ".join(a.option_strings[0] + "/" + a.option_strings[1] if len(a.option_strings) > 1 else
                  (a.option_strings or [a.metavar or a.dest])[0] for a in required)
    assert len(lines) == 2 and lines[1].startswith(f"usage: kvreplay {command}")
    assert lines[1].endswith(f"(kvreplay {command} --help: every option)")


def test_an_unknown_flag_is_named_by_its_command(capsys):
    assert usage_error(capsys, "run", WALK, "--no-such-flag", "3") == [
        "kvreplay run: unrecognized arguments: --no-such-flag 3",
        "usage: kvreplay run TRACE [TRACE ...] [options]  (kvreplay run --help: every option)"]


def test_the_usage_line_names_the_positionals_and_required_flags(capsys):
    assert usage_error(capsys, "plan", WALK, "--bogus")[1] == (
        "usage: kvreplay plan TRACE [TRACE ...] --model MODEL [options]  (kvreplay plan --help: every option)")
    assert usage_error(capsys, "hash")[0] == "kvreplay hash: the following arguments are required: input, --output/-o"


def test_no_command_and_an_unknown_command(capsys):
    assert usage_error(capsys) == ["kvreplay: the following arguments are required: COMMAND",
                                   "usage: kvreplay COMMAND [options]  (kvreplay --help: the commands)"]
    assert usage_error(capsys, "simulat")[0].startswith("kvreplay: COMMAND: invalid choice: 'simulat'")


def test_flags_are_never_abbreviated(capsys):
    # --warmup would otherwise mean --warmup-fraction, and change meaning when a --warmup flag arrives
    assert usage_error(capsys, "run", WALK, "--warmup", "0.5")[0] == \
        "kvreplay run: unrecognized arguments: --warmup 0.5"


def test_a_bad_value_names_its_flag(capsys):
    assert usage_error(capsys, "simulate", WALK, "--engine-style", "tgi")[0] == (
        "kvreplay simulate: --engine-style: invalid choice: 'tgi' (choose from 'vllm', 'sglang', 'trtllm')")
    assert usage_error(capsys, "sweep", WALK, "--jobs", "0")[0] == "kvreplay sweep: --jobs: must be >= 1, got 0"
    assert usage_error(capsys, "synth", "--token-log", "-o", "x.jsonl", "--timestamp-at", "noon")[0] == (
        "kvreplay synth: --timestamp-at: a token position (0, 1, ...), end or none, got 'noon'")
    assert usage_error(capsys, "plan", WALK, "--model", "Llama-3.1-8B", "--min-window-requests", "0")[0] == (
        "kvreplay plan: --min-window-requests: must be >= 1, got 0")


DURATION_TYPES = (common.duration, common.positive_duration)


def duration_flags():
    """Every flag that takes a duration, in every command (new ones included)."""
    return [(name, a.option_strings[0]) for name, p in sorted(COMMANDS.items()) for a in p._actions
            if a.option_strings and a.type in DURATION_TYPES]


def test_the_duration_flags_are_found():
    found = {flag for _, flag in duration_flags()}
    assert {"--slo-ttft-p90", "--slo-tpot-p90", "--slo-e2e-p99", "--window", "--slo-ttft", "--slo-tpot",
            "--session-spacing", "--think-time", "--ttl", "--delay"} <= found


@pytest.mark.parametrize("command, flag", duration_flags())
def test_a_duration_without_its_unit_is_refused(capsys, command, flag):
    first = usage_error(capsys, command, *([WALK] if command not in ("synth",) else ["-o", "x.jsonl"]), flag, "2000")
    assert first[0] == f"kvreplay {command}: {flag}: 2000 what? write 2000s or 2000ms"


@pytest.mark.parametrize("argv, message", [
    (("run", WALK, "--over-time", "600"), "--over-time: 600 what? write 600s (seconds of trace time) or 600req "
                                          "(requests per window)"),
    (("merge", WALK, WALK, "-o", "m.jsonl", "--offsets", "0,90"), None),  # checked after parsing: below
    (("run", WALK, "--capacity", "80Gb"), "--capacity: 80Gb is in bits; write 80GB or 80GiB"),
    (("run", WALK, "--capacity", "64Gbit"), "--capacity: 64Gbit is in bits; write 64GB or 64GiB"),
])
def test_units_named_on_the_command_line(capsys, argv, message):
    if message is None:
        assert main(list(argv)) == 2
        assert capsys.readouterr().err == "kvreplay: --offsets: 90 what? write 90s or 90ms\n"
        return
    assert usage_error(capsys, *argv)[0] == f"kvreplay {argv[0]}: {message}"


@pytest.mark.parametrize("argv, message", [
    (("simulate", WALK, "--time-model", "instant", "--capacity", "8", "--tiers", "dram=64Gb"),
     "64Gb is in bits; write 64GB or 64GiB"),
    (("simulate", WALK, "--model", "Llama-3.1-8B", "--time-model", "instant", "--capacity", "8", "--tiers",
      "dram=64GiB@64Gb/s"), "64Gb/s is in bits per second; write 8GB/s"),
    (("simulate", WALK, "--model", "Llama-3.1-8B", "--time-model", "instant", "--capacity", "8",
      "--prefill-instances", "1", "--decode-instances", "1", "--kv-link", "100Gbps"),
     "100Gbps is in bits per second; write 12.5GB/s"),
])
def test_bits_are_refused_inside_specs(capsys, argv, message):
    assert main(list(argv)) == 2
    assert message in capsys.readouterr().err


def warmup_commands():
    return sorted(name for name, p in COMMANDS.items() if any("--warmup" in a.option_strings for a in p._actions))


def test_the_warmup_flag_is_found():
    assert {"simulate", "plan", "report", "sweep"} <= set(warmup_commands())


@pytest.mark.parametrize("command", warmup_commands())
def test_a_warmup_of_a_bare_number_above_1_is_refused_as_parsed(capsys, command):
    # below 1 a bare number is a fraction of the arrival span; 600 could be seconds or a mistake
    extra = ["--model", "Llama-3.1-8B"] if command == "plan" else []
    lines = usage_error(capsys, command, WALK, *extra, "--warmup", "600")
    assert lines[0] == (f"kvreplay {command}: --warmup: 600 what? a bare number is a fraction of the arrival span, "
                        "in [0, 1); a duration takes its unit: 600s or 600ms")
    assert len(lines) == 2 and lines[1].startswith(f"usage: kvreplay {command}")
    assert usage_error(capsys, command, WALK, *extra, "--warmup", "10 parsecs")[0] == (
        f"kvreplay {command}: --warmup: unknown unit 'parsecs' in '10 parsecs' (units: ns, us, ms, s, m, h, d)")


def test_the_kv_pool_flags_take_bytes_not_bits(capsys):
    assert usage_error(capsys, "simulate", WALK, "--kv-cache-memory", "8Gb")[0] == (
        "kvreplay simulate: --kv-cache-memory: 8Gb is in bits; write 8GB or 8GiB")


@pytest.mark.parametrize("command, flags", [("plan", ("--warmup-fraction", "--engine")),
                                            ("stats", ("--warmup-fraction", "--engine")),
                                            ("simulate", ("--warmup-fraction",)), ("mrc", ("--engine",))])
def test_flags_a_command_only_refuses_are_left_out_of_its_help(capsys, command, flags):
    # they stay parsed, to say what to use instead (tests/test_flag_walk.py refuses each)
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    assert "--block-size" in shown and not any(re.search(rf"{flag}\b(?!-)", shown) for flag in flags)
    assert "--warmup-fraction" in COMMANDS["run"].format_help() and "--engine" in COMMANDS["run"].format_help()
