"""A plan file is untrusted input (serving/plan_schema.py, output/plan_html.py): `report --plan`
checks the whole document (types, ranges, finite non-negative costs, bounded nesting) and refuses
with `FILE: path.to.field: what is wrong`, exit 2, writing nothing; whatever reaches the page is
escaped, numbers included."""

from __future__ import annotations

import copy
import json

import pytest

import kvreplay
from conftest import jsonl, write
from kvreplay.cli import main
from kvreplay.errors import TraceError
from kvreplay.output.html import _svg, _table
from kvreplay.output.plan_html import plan_section
from kvreplay.serving.plan import plan
from kvreplay.serving.plan_check import serve_plan
from kvreplay.serving.plan_schema import check_document
from kvreplay.catalog.prices import Prices
from kvreplay.serving.slo import SLO

from sim_cases import trace_of

SCRIPT = "<script>alert(1)</script>"
LINES = jsonl(*[{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]} for k in range(8)])
EIGHT = trace_of(*[([f"r{k}"], 4, 0, 1) for k in range(8)])


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A real plan of the eight-request trace (two tier sets, so tier economics are drawn), and
    the files it was made from."""
    d = tmp_path_factory.mktemp("plan")
    trace = write(d, "eight.jsonl", LINES)
    profile = write(d, "one.json", json.dumps({"format": "kvreplay-step-polynomial", "unit": "s",
                                                "terms": [{"coef": 1.0}]}))
    out = d / "plan.json"
    assert main(["plan", str(trace), "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4",
                 "--time-model", str(profile), "--price", "H100=2/h", "--tp", "1,2", "--tiers",
                 "none;dram=64GiB@64GB/s", "-o", str(out)]) == 0
    return {"trace": trace, "plan": json.loads(out.read_text()), "dir": d}


def report(capsys, made, doc_bytes: bytes, tmp_path):
    """`kvreplay report --plan` on the bytes: (exit code, stderr's last line, the page's path)."""
    bad = write(tmp_path, "tampered.json", doc_bytes)
    page = tmp_path / "r.html"
    code = main(["report", str(made["trace"]), "--block-size", "4", "--capacities", "10,20", "--plan", str(bad),
                 "-o", str(page)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()[-1] if err.strip() else "", page, bad


def tampered(doc: dict, path: tuple, value) -> bytes:
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return json.dumps(doc).encode()


DELETE = object()
BEST = ("loads", 0, "best")
ROW = ("loads", 0, "tried", 0)

CASES = [
    (ROW + ("tp",), SCRIPT, "loads[0].tried[0].tp: Expected `int`, got `str`"),
    (ROW + ("tp",), 0, "loads[0].tried[0].tp: Expected `int` >= 1"),
    (ROW + ("instances",), 2.5, "loads[0].tried[0].instances: Expected `int | null`, got `float`"),
    (ROW + ("cost_per_hour",), -5.0, "loads[0].tried[0].cost_per_hour: Expected `float` >= 0.0"),
    (ROW + ("cost_per_hour",), "12", "loads[0].tried[0].cost_per_hour: Expected `float | null`, got `str`"),
    (ROW + ("cost_per_hour",), 1e300, "loads[0].tried[0].cost_per_hour: Expected `float` <= 1000000000000000.0"),
    (ROW + ("hit_rate",), 39.18, "loads[0].tried[0].hit_rate: Expected `float` <= 1.0"),
    (ROW + ("verdict",), "wins", "loads[0].tried[0].verdict: Invalid enum value 'wins'"),
    (ROW + ("why",), 7, "loads[0].tried[0].why: Expected `str`, got `int`"),
    (ROW + ("gpu",), "x" * 5000, "loads[0].tried[0].gpu: Expected `str` of length <= 4096"),
    (ROW + ("hit_rate",), DELETE, "loads[0].tried[0]: a meets row needs hit_rate"),
    (BEST + ("binding", "objective"), "TTFT p50", "loads[0].best.binding.objective: Invalid enum value 'TTFT p50'"),
    (BEST + ("worst_window_s",), {"p42": 1.0}, "loads[0].best.worst_window_s: Invalid enum value 'p42' (as a key)"),
    (("loads", 0, "counts", "meets"), -1, "loads[0].counts.meets: Expected `int` >= 0"),
    (("loads", 0, "load"), 0, "loads[0].load: Expected `float` > 0.0"),
    (("loads", 0, "load_kind"), "<b>", "loads[0].load_kind: Invalid enum value '<b>'"),
    (("loads", 0, "probes", 0, "cost_per_hour"), -1, "loads[0].probes[0].cost_per_hour: Expected `float` >= 0.0"),
    (("loads", 0, "tier_economics", 0, "versus_none", "gpus_saved"), "two",
     "loads[0].tier_economics[0].versus_none.gpus_saved: Expected `int`, got `str`"),
    (("loads",), [], "loads: Expected `array` of length >= 1"),
    (("runs",), SCRIPT, "runs: Expected `int`, got `str`"),
    (("min_window_requests",), SCRIPT, "min_window_requests: Expected `int`, got `str`"),
    (("slo_limits", "ttft_p90_s"), -2.0, "slo_limits.ttft_p90_s: Expected `float` > 0.0"),
    (("slo_limits", "evil"), 1.0, "slo_limits: Object contains unknown field `evil`"),
    (("judged_at",), "optimistic", "judged_at: Invalid enum value 'optimistic'"),
    (("trace_digest",), SCRIPT, "trace_digest: Expected `str` matching regex '^[0-9a-f]{32}$'"),
    (("run_options", "evil"), "x", "run_options: Object contains unknown field `evil`"),
    (("run_options", "block_size"), "4", "run_options.block_size: Expected `int`, got `str`"),
    (("run_options", "time_model"), "/dev/zero", "run_options.time_model: /dev/zero is not a regular file"),
    (("run_options", "rate_profile"), "/dev/stdin", "run_options.rate_profile: /dev/stdin is not a regular file"),
    (("monotonicity_violations",), [{"config": "x"}], "monotonicity_violations[0]: Object missing required field `load`"),
    (("slo",), DELETE, "not a plan written by `kvreplay plan -o FILE.json` (Object missing required field `slo`)"),
]


@pytest.mark.parametrize("path, value, message", CASES, ids=[".".join(map(str, c[0])) + "=" + repr(c[1])[:20]
                                                               for c in CASES])
def test_a_tampered_plan_is_refused_naming_the_field(capsys, tmp_path, made, path, value, message):
    code, line, page, bad = report(capsys, made, tampered(made["plan"], path, value), tmp_path)
    assert code == 2 and line == f"{bad}: {message}"
    assert not page.exists()


@pytest.mark.parametrize("data, message", [
    (b"", "not JSON (Input data was truncated)"),
    (b"[" * 200_000 + b"]" * 200_000, "nested 200,000 levels deep; a plan nests at most 12"),
    (b'{"slo": ' + b'{"a": ' * 50 + b"1" + b"}" * 51, "nested 51 levels deep; a plan nests at most 12"),
    (b"[1, 2]", "not a plan written by `kvreplay plan -o FILE.json` (Expected `object`, got `array`)"),
    (b'{"slo": 1e999}', "slo: Number out of range"),
    (b"\xff\xfe", "not UTF-8 text (byte 0)"),
], ids=["empty", "deep arrays", "deep objects", "an array", "infinity", "not UTF-8"])
def test_a_plan_that_is_not_json_or_too_deep_is_refused(capsys, tmp_path, made, data, message):
    code, line, page, bad = report(capsys, made, data, tmp_path)
    assert code == 2 and line == f"{bad}: {message}"
    assert not page.exists()


def test_a_truncated_plan_is_refused(capsys, tmp_path, made):
    whole = json.dumps(made["plan"]).encode()
    for cut in (1, len(whole) // 3, len(whole) - 1):
        code, line, page, bad = report(capsys, made, whole[:cut], tmp_path)
        assert code == 2 and line.startswith(f"{bad}: not JSON (") and not page.exists()


def _paths(node, prefix=()):
    """Every leaf of a JSON document, with its path."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            yield from _paths(v, prefix + (k,))
    else:
        yield prefix, node


def _field_text(path) -> str:
    """msgspec's name of a field: a.b[0].c, and a mapping's value as [...]."""
    out = ""
    for k, parent in zip(path, (None,) + path):
        if parent in ("worst_window_s", "price_sources", "window_grouping"):
            out += "[...]"
        else:
            out += f"[{k}]" if isinstance(k, int) else ("." if out else "") + k
    return out


def test_script_through_every_number_is_refused_naming_the_field(made):
    # every number the plan holds (instances, tp, counts, costs, ...), one at a time: the schema
    # refuses text there, naming the field, so it never reaches a page
    numbers = [(p, v) for p, v in _paths(made["plan"]) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert len(numbers) > 150
    checked = 0
    for path, _ in numbers:
        doc = json.loads(tampered(made["plan"], path, SCRIPT))
        with pytest.raises(TraceError) as e:
            check_document(doc)
        assert e.value.field == _field_text(path), (path, str(e.value))
        checked += 1
    assert checked > 150


def test_script_through_every_text_field_is_escaped(made):
    # every string the schema lets be any text, all at once; then the section, the plot and the
    # served table rendered: no markup of the plan's reaches the page unescaped
    doc = copy.deepcopy(made["plan"])
    fixed = {"verdict", "objective", "load_kind", "judged_at", "trace_digest", "pricing"}
    count = 0
    for path, v in _paths(doc):
        if isinstance(v, str) and path[-1] not in fixed and not (len(path) > 1 and path[-2] in ("worst_window_s",)):
            node = doc
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = SCRIPT + v
            count += 1
    for block in doc["loads"]:  # keys the page shows: a window grouping's objective names
        for r in block["tried"] + [block["best"]]:
            if r.get("price_sources"):
                r["price_sources"] = {SCRIPT: SCRIPT}
    assert count > 70
    check_document(doc)  # all of it is valid text
    served = serve_plan(EIGHT, made["plan"])
    for row in served:
        row["best"] = doc["loads"][0]["best"]
        row["judged_at"] = SCRIPT
    page = "\n".join(plan_section(doc, _svg, _table, served=served))
    assert "<script" not in page.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    page = "\n".join(plan_section(doc, _svg, _table, not_served=SCRIPT))
    assert "<script" not in page.lower()


def test_the_api_checks_a_plan_given_as_a_dict(made):
    doc = copy.deepcopy(made["plan"])
    doc["loads"][0]["tried"][0]["instances"] = SCRIPT
    with pytest.raises(TraceError) as e:
        kvreplay.report_html(EIGHT, policies=["lru"], capacities=[1, 2], block_size=4, plan=doc)
    assert str(e.value) == "plan: loads[0].tried[0].instances: Expected `int | null`, got `str`"
    result = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), tps=(1,),
                  block_size=4, time_model=str(made["dir"] / "one.json"))
    read = check_document(result)  # a plan as plan() returns it passes, read back as the same plan
    assert read["loads"][0]["best"]["instances"] == 1 and read["run_options"] == result["run_options"]
    # a field the schema does not know is dropped, not carried to a page unchecked
    result["loads"][0]["tried"][0]["evil"] = SCRIPT
    assert "evil" not in check_document(result)["loads"][0]["tried"][0]
