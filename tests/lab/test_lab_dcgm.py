"""The deep health tier against the lab's simulated `dcgmi` (lab/payload/dcgmi.py).

Locally: the fake's JSON goes through the probe's parser (plugins/module_utils/dcgm.py) with each
fault of the description's `faults` list. On a fleet: `provision check --deep` on three hosts, one
passing, one with a failing DCGM test (named GPU and action), one with a skipped test (skip, never
pass); there the test installs the simulated dcgmi on the hosts itself. With the stack key
dcgm.install on, the roles install NVIDIA's DCGM package from the lab's model of NVIDIA's repository
(datacenter-gpu-manager-4-cuda12 -> -4-core, which carries the simulated dcgmi and nv-hostengine):
`provision check --deep` then runs the installed dcgmi, and a second run changes nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_roles_helpers import fleet_args, provision_cli, run_playbook, stack_vars

from lab.payload import PAYLOAD_DIR, read
from lab.profiles import host_description

REPO_ROOT = Path(__file__).resolve().parents[2]
DESCRIPTION = "etc/fake-nvidia/gpus.json"


def _parser() -> Any:
    spec = importlib.util.spec_from_file_location(
        "dcgm_parse", REPO_ROOT / "plugins" / "module_utils" / "dcgm.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_local(tmp_path: Path, faults: list[dict[str, Any]], level: str) -> tuple[int, str]:
    desc = host_description("rtx4090-4", "gpu01", "loaded")
    desc["faults"] = faults
    config = tmp_path / "gpus.json"
    config.write_text(json.dumps(desc), encoding="utf-8")
    env = dict(os.environ, FAKE_NVIDIA_CONFIG=str(config))
    proc = subprocess.run(
        [sys.executable, str(PAYLOAD_DIR / "dcgmi.py"), "diag", "-r", level, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    return proc.returncode, proc.stdout


def test_fake_dcgmi_through_the_parser(tmp_path: Path) -> None:
    dcgm = _parser()
    rc, out = _run_local(tmp_path, [], "1")
    parsed = dcgm.parse_diag(out)
    assert rc == 0 and parsed["ok"] and len(parsed["results"]) == 9
    assert parsed["results"][0]["gpus"] == [0, 1, 2, 3]

    rc, out = _run_local(tmp_path, [{"kind": "dcgm_fail", "test": "GPU Memory", "gpu": 2}], "2")
    bad = [r for r in dcgm.parse_diag(out)["results"] if r["status"] != "pass"]
    assert rc == 1 and [(r["test"], r["gpus"], r["status"]) for r in bad] == [
        ("GPU Memory", [2], "fail")
    ]
    assert "lab fault" in bad[0]["reason"]

    rc, out = _run_local(tmp_path, [{"kind": "dcgm_skip", "test": "PCIe"}], "2")
    skipped = [r for r in dcgm.parse_diag(out)["results"] if r["status"] == "skip"]
    assert rc == 0 and [r["gpus"] for r in skipped] == [[0], [1], [2], [3]]


def _install(fleet: Any, name: str, faults: list[dict[str, Any]]) -> None:
    """The simulated dcgmi on a host, and the faults in its GPU description."""
    merged = fleet.runtime(name).host.merged
    tool = merged / "usr/local/bin/dcgmi"
    tool.write_text(read("dcgmi.py"), encoding="utf-8")
    tool.chmod(0o755)
    path = merged / DESCRIPTION
    desc = json.loads(path.read_text(encoding="utf-8"))
    desc["faults"] = faults
    path.write_text(json.dumps(desc, indent=2) + "\n", encoding="utf-8")


def test_check_deep_pass_fail_skip(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(3, profiles=("rtx4090-4",))
    names = [h.name for h in fleet.hosts]
    for name in names:
        fleet.set_profile(name, "rtx4090-4", driver="loaded")
    _install(fleet, names[0], [])
    _install(fleet, names[1], [{"kind": "dcgm_fail", "test": "GPU Memory", "gpu": 1}])
    _install(fleet, names[2], [{"kind": "dcgm_skip", "test": "PCIe"}])
    proc, data = provision_cli(
        tmp_path, "check", "--deep", *fleet_args(fleet), "-e", "gpu_stack_dcgm_diag_level=2"
    )
    assert proc.returncode in (1, 5), proc.stdout[-3000:] + proc.stderr[-3000:]
    by_host = {h: {c["id"]: c for c in data["hosts"][h]["checks"]} for h in data["hosts"]}
    assert len(by_host) == 3, sorted(by_host)
    diag = {h: checks["health.dcgm_diag"] for h, checks in by_host.items()}
    ordered = [diag[h] for h in sorted(diag)]  # gpu01, gpu02, gpu03 (inventory names)
    assert ordered[0]["status"] == "pass", ordered[0]
    assert "dcgmi diag -r 2" in ordered[0]["message"]
    assert ordered[1]["status"] == "fail", ordered[1]
    assert "GPU Memory fail on GPU 1" in ordered[1]["message"], ordered[1]
    assert ordered[1]["message"].endswith("(action: drain)"), ordered[1]
    assert ordered[2]["status"] == "skip", ordered[2]
    assert "PCIe skip on GPU 0" in ordered[2]["message"], ordered[2]
    assert all(checks["health.dcgm"]["status"] == "pass" for checks in by_host.values())


def test_roles_install_dcgm_and_check_deep_runs_it(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(1, ["rtx4090-4"])
    host = fleet.hosts[0].name
    ev = stack_vars(fleet.stack_path, gpu_stack_dcgm_install=True)
    run = run_playbook(fleet, "site.yml", ev, tmp=tmp_path / "site", skip_tags="pytorch,validation")
    assert run.rc == 0, run.output[-6000:]
    res = fleet.run(
        host,
        "dpkg-query -W -f='${Package} ${Version}\\n' 'datacenter-gpu-manager-4-*'; "
        "command -v dcgmi; systemctl is-enabled nvidia-dcgm; systemctl is-active nvidia-dcgm",
        timeout=60,
    )
    assert res.stdout.split("\n")[:5] == [
        "datacenter-gpu-manager-4-core 1:4.4.0-1",
        "datacenter-gpu-manager-4-cuda12 1:4.4.0-1",
        "/usr/bin/dcgmi",
        "enabled",
        "active",
    ], res.stdout

    proc, data = provision_cli(tmp_path, "check", "--deep", *fleet_args(fleet))
    checks = {c["id"]: c for c in data["hosts"][host]["checks"]}
    assert checks["health.dcgm"]["status"] == "pass", checks["health.dcgm"]
    assert checks["health.dcgm"]["actual"] == "/usr/bin/dcgmi", checks["health.dcgm"]
    assert checks["health.dcgm_diag"]["status"] == "pass", checks["health.dcgm_diag"]
    assert "dcgmi diag -r 1" in checks["health.dcgm_diag"]["message"], proc.stdout[-3000:]

    again = run_playbook(
        fleet, "site.yml", ev, tmp=tmp_path / "again", skip_tags="pytorch,validation"
    )
    assert again.rc == 0, again.output[-4000:]
    changed = [ln for ln in again.output.splitlines() if ln.startswith("changed:")]
    assert again.changed(host) == 0, changed
