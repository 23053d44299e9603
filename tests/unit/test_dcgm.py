"""The deep health tier: `dcgmi diag --json` parsed (plugins/module_utils/dcgm.py) on real captures
(tests/unit/fixtures/captures, sources in SOURCES.md) and judged (components/health_deep.py).

Where no public capture of a shape exists (a failing test, a Warn, an error behind a Pass), the
document is built from the field names NVIDIA/DCGM:nvvs/src/JsonOutput.cpp writes, and the test
says so."""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils import check_catalogue as catalog
from ansible_collections.provision.gpu.plugins.module_utils import dcgm
from ansible_collections.provision.gpu.plugins.module_utils import evaluate as ev
from ansible_collections.provision.gpu.plugins.module_utils.components import health_deep
from conftest import capture
from probe_fakes import FakeHost, judge, stack

PASS_8 = "dcgmi-diag-json__dcgm3.1.0_8gpu_level1_pass_nvidia_test.txt"
SKIPS = "dcgmi-diag-json__dcgm_level3_t400_skips_issue139_partial.txt"
DCGM4 = "dcgmi-diag-json__dcgm4_level3_8gpu_diagnostic_issue215_partial.txt"


def issue139() -> str:
    """The issue's JSON, closed where the stored copy ends and without the poster's `{"..."}`
    placeholder for the elided Deployment category (both visible in the capture file)."""
    text = capture(SKIPS).replace('{"..."},\n', "").replace("# [trimmed]\n", "")
    return text.rstrip().rstrip(",") + "\n]}]}}\n"


def doc(*results: dict[str, Any], category: str = "Hardware", test: str = "Diagnostic") -> str:
    """A document in JsonOutput.cpp's layout (no public capture of this shape; see module doc)."""
    tests = [{"name": test, "results": list(results)}]
    return json.dumps(
        {
            "DCGM GPU Diagnostic": {
                "test_categories": [{"category": category, "tests": tests}],
                "version": "3.3.9",
            }
        }
    )


def test_real_level1_output_all_pass() -> None:
    parsed = dcgm.parse_diag(capture(PASS_8))
    assert parsed["ok"] and parsed["version"] == "3.1.0"
    assert len(parsed["results"]) == 9 + 8  # nine software tests for all GPUs, one result per GPU
    assert {r["status"] for r in parsed["results"]} == {"pass"}
    assert parsed["results"][0]["gpus"] == list(range(8))  # "0,1,2,3,4,5,6,7"
    assert parsed["results"][-1]["gpus"] == [7]  # an integer gpu_ids
    assert parsed["results"][6]["test"] == "Page Retirement/Row Remap"


def test_real_skips_are_skip_never_pass() -> None:
    parsed = dcgm.parse_diag(issue139())
    assert [r["test"] for r in parsed["results"]] == [
        "PCIe",
        "GPU Memory",
        "Diagnostic",
        "EUD Test",
        "Targeted Stress",
    ]
    assert {r["status"] for r in parsed["results"]} == {"skip"}
    assert parsed["results"][0]["gpus"] == [0]  # "gpu_id" : "0"
    assert parsed["results"][0]["reason"] == "DCGM skipped the test and gave no reason"


def test_real_dcgm4_results_by_entity() -> None:
    # NVIDIA/DCGM#215 posted one test object of a DCGM 4 `-r 3` run; the document around it (root
    # "DCGM Diagnostic", the category) is not in that capture and is added here
    test = json.loads(capture(DCGM4).rstrip().rstrip(","))
    category = {"category": "Hardware", "tests": [test]}
    text = json.dumps({"DCGM Diagnostic": {"test_categories": [category]}})
    parsed = dcgm.parse_diag(text)
    assert [r["gpus"] for r in parsed["results"]] == [[g] for g in range(8)]
    assert {r["status"] for r in parsed["results"]} == {"pass"}
    assert parsed["results"][0]["test"] == "diagnostic"


def test_pass_with_an_error_behind_it_is_unknown() -> None:
    # NVIDIA/DCGM#284 (prose only, no capture): the memory test records DCGM_FR_MEMORY_ALLOC and
    # says PASS. Built from JsonOutput.cpp's AppendError fields; the error id value is arbitrary.
    text = doc(
        {
            "gpu_ids": "0",
            "status": "PASS",
            "warnings": [{"warning": "DCGM_FR_MEMORY_ALLOC: could not allocate", "error_id": 7}],
        },
        test="GPU Memory",
    )
    (r,) = dcgm.parse_diag(text)["results"]
    assert r["status"] == "unknown"
    assert "Pass but recorded an error" in r["reason"] and "DCGM_FR_MEMORY_ALLOC" in r["reason"]


def test_unknown_status_and_garbage() -> None:
    (r,) = dcgm.parse_diag(doc({"gpu_ids": "1", "status": "Incomplete"}))["results"]
    assert r["status"] == "unknown" and "Incomplete" in r["reason"]
    assert (
        dcgm.parse_diag("Error: unable to connect to host engine")["error"]
        == "no JSON in the dcgmi output"
    )
    assert not dcgm.parse_diag('{"other": 1}')["ok"]
    runtime = dcgm.parse_diag(
        '{"DCGM GPU Diagnostic": {"runtime_error": "NVVS failed", "version": "3.3.9"}}'
    )
    assert runtime["error"] == "NVVS failed" and not runtime["ok"]


# ------------------------------------------------------------------------------------ judged


def host_with(rc: int, out: str, err: str = "") -> FakeHost:
    h = FakeHost().gpus()
    h.binaries.add("dcgmi")
    h.commands["/usr/bin/dcgmi diag"] = (rc, out, err)
    return h


def deep(h: FakeHost, **over: Any) -> dict[str, Any]:
    return judge(h, ["health_deep"], stack(**over), check_mode=True)


def test_passing_diagnostic_passes_and_runs_the_stack_level() -> None:
    h = host_with(0, capture(PASS_8))
    r = deep(h, **{"dcgm.diag_level": 2})
    assert ["/usr/bin/dcgmi", "diag", "-r", "2", "--json"] in h.ran
    assert r["by_id"]["health.dcgm"]["status"] == "pass"
    check = r["by_id"]["health.dcgm_diag"]
    assert check["status"] == "pass" and "17 results passed" in check["message"]


def test_failing_test_names_the_gpu_and_the_action() -> None:
    # no public capture of a failing test in JSON: JsonOutput.cpp's per-GPU layout
    text = doc(
        {"gpu_ids": 0, "status": "Pass"},
        {
            "gpu_ids": 1,
            "status": "Fail",
            "warnings": [{"warning": "GPU 1 Error using CUDA API cuCtxCreate", "error_id": 3}],
        },
    )
    check = deep(host_with(226, text))["by_id"]["health.dcgm_diag"]
    assert check["status"] == "fail" and check["action"] == "drain"
    assert check["message"].endswith("(action: drain)")  # report.json keeps the message
    assert "Diagnostic fail on GPU 1 (" in check["message"]  # index, bus id, uuid from nvidia-smi
    (finding,) = check["findings"]
    assert finding["gpus"] == [1] and "cuCtxCreate" in finding["reason"]


def test_row_remap_failure_asks_for_a_gpu_reset() -> None:
    text = doc(
        {"gpu_ids": "0,1", "status": "Fail"},
        category="Deployment",
        test="Page Retirement/Row Remap",
    )
    check = deep(host_with(226, text))["by_id"]["health.dcgm_diag"]
    assert check["status"] == "fail" and check["action"] == "reset_gpu"


def test_skipped_tests_are_skip_with_the_reason() -> None:
    check = deep(host_with(0, issue139()))["by_id"]["health.dcgm_diag"]
    assert check["status"] == "skip"
    assert "PCIe skip on GPU 0" in check["message"] and "gave no reason" in check["message"]
    assert check["action"] == "none" and "(action:" not in check["message"]


def test_without_dcgm_it_says_so() -> None:
    r = deep(FakeHost().gpus())
    assert r["by_id"]["health.dcgm"]["status"] == "skip"
    assert r["by_id"]["health.dcgm_diag"]["actual"] == "not run"
    assert "not installed" in r["by_id"]["health.dcgm_diag"]["message"]


def test_timeout_is_unknown_not_pass() -> None:
    h = host_with(-9, "", "timed out after 900 s")
    check = deep(h)["by_id"]["health.dcgm_diag"]
    assert check["status"] == "skip" and "did not finish within 900 s" in check["message"]
    assert check["action"] == "drain" and check["message"].endswith("(action: drain)")


def test_not_in_the_default_probe() -> None:
    assert health_deep.NAME not in ev.COMPONENTS and health_deep.NAME in ev.ON_REQUEST
    h = host_with(0, capture(PASS_8))
    judge(h, list(ev.COMPONENTS), check_mode=True)
    assert not any(argv[0].endswith("dcgmi") for argv in h.ran)


def test_catalog_lists_the_deep_ids_as_the_component_declares_them() -> None:
    for spec in health_deep.CHECKS:
        assert catalog.CATALOG[spec.id] == spec.entry()


def test_deep_is_asked_for_by_check_and_on_in_validate() -> None:
    from provisioner import session, stack  # noqa: PLC0415

    def deep_var(**kw: Any) -> object:
        s = session.Settings(**kw)
        return session.build_extravars(s, stack.load(None)).extravars.get("gpu_stack_health_deep")

    assert deep_var(command="check") is False
    assert deep_var(command="check", deep=True) is True
    assert deep_var(command="validate") is True
    assert deep_var(command="validate", deep=False) is False
    assert deep_var(command="run") is None  # provisioning runs never start the diagnostic
    given = deep_var(command="check", extra_vars=("gpu_stack_health_deep=true",))
    assert given == "true"  # -e wins


def test_check_and_validate_take_deep() -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from provisioner.cli import cli  # noqa: PLC0415

    for command in ("check", "validate"):
        out = CliRunner().invoke(cli, [command, "--help"]).output
        assert "--deep / --no-deep" in out and "dcgmi diag" in out
