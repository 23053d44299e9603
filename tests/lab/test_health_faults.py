"""Issue 19 item 5: the simulated nvidia-smi, lspci and kernel log inject each health fault.

Two levels:
- locally (no root, no fleet): the payload programs with a description carrying `faults`, read
  through the project's own collect.health_section and judged by the health component; one case
  per fault, plus the healthy description of every GPU profile giving no finding;
- one fleet (tests/lab, root): five H100 hosts, each with its faults, through `provision check`:
  each faulty host fails naming the GPU and the action, the healthy host stays green, and every
  host is byte-identical afterwards (the check is read-only).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.payload import PAYLOAD_DIR
from lab.profiles import host_description

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "playbooks" / "collections"))

from ansible_collections.provision.gpu.plugins.module_utils import collect as c  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import gpu as gpu_facts  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.components import (  # noqa: E402
    health,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.base import (  # noqa: E402
    Context,
)

VERSION = "535.129.03"
SCRIPTS = {"nvidia-smi": "nvidia_smi.py", "lspci": "lspci.py", "dmesg": "dmesg.py"}


class SimHost(c.HostIO):
    """The payload programs as a host: nvidia-smi, lspci and dmesg from lab/payload."""

    def __init__(self, tmp: Path, desc: dict[str, Any], loaded: str = VERSION) -> None:
        self.config = tmp / "gpus.json"
        self.config.write_text(json.dumps(desc))
        (tmp / "loaded").write_text(f"{loaded}\nproprietary\n")
        (tmp / "state").mkdir(exist_ok=True)
        if desc.get("nvswitch"):
            (tmp / "state" / "fabricmanager").write_text("1\n")  # the fabric manager's mark
        self.env = {
            "PATH": "/usr/bin:/bin",
            "FAKE_NVIDIA_CONFIG": str(self.config),
            "FAKE_NVIDIA_LOADED": str(tmp / "loaded"),
            "FAKE_NVIDIA_DRIVER_VERSION": VERSION,
            "FAKE_NVIDIA_STATE": str(tmp / "state"),
        }
        self.ran: list[list[str]] = []

    def run(
        self, argv: list[str], timeout: float | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        self.ran.append(list(argv))
        script = SCRIPTS.get(argv[0])
        if script is None:
            return 127, "", f"{argv[0]}: command not found"
        proc = subprocess.run(
            [sys.executable, str(PAYLOAD_DIR / script), *argv[1:]],
            capture_output=True, text=True, env=self.env, check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def which(self, name: str) -> str | None:
        return f"/usr/local/bin/{name}" if name in SCRIPTS else None

    def read(self, path: str) -> str | None:
        return None


def judge(tmp: Path, desc: dict[str, Any], fm_active: bool = True,
          loaded: str = VERSION) -> tuple[dict[str, dict[str, Any]], SimHost]:
    io = SimHost(tmp, desc, loaded)
    facts: dict[str, Any] = {"gpu": gpu_facts.gather(lambda argv: io.run(list(argv)))}
    facts["health"] = c.health_section(io, facts["gpu"])
    state = "active" if fm_active else "failed"
    facts["units"] = {"nvidia-fabricmanager": {"active": state}}
    ctx = Context(facts, {"host": "gpu01", "health": {"expected_gpus": 0}}, check_mode=True)
    health.judge(ctx)
    return {x["id"]: x for x in ctx.checks}, io


def described(faults: dict[str, Any] | None = None, profile: str = "h100-sxm-8") -> dict[str, Any]:
    desc = host_description(profile, "gpu01", "auto")
    if faults:
        desc["faults"] = faults
    return desc


@pytest.mark.parametrize("profile", ["h100-sxm-8", "a100-sxm-8", "rtx4090-4", "t4-1"])
def test_healthy_simulated_hosts_give_no_finding(tmp_path: Path, profile: str) -> None:
    checks, io = judge(tmp_path, described(profile=profile))
    bad = {k: v["message"] for k, v in checks.items() if v["status"] not in ("pass", "skip")}
    assert bad == {}
    assert checks["health.gpu_count"]["status"] == "pass"
    assert checks["health.xid"]["status"] == "pass"  # the fake dmesg answered: judged, not skipped
    for argv in io.ran:  # passive: nothing that changes or resets the GPUs or the log
        assert not {"-pm", "-r", "-rac", "-c", "-C"} & set(argv), argv


@pytest.mark.parametrize(
    ("faults", "cid", "action", "bus"),
    [
        ({"gone": [7]}, "health.gpu_count", "reboot", "db:00"),
        ({"xid": [{"gpu": 2, "xid": 79}]}, "health.xid", "reboot", "3a:00"),
        ({"xid": [{"gpu": 1, "xid": 48}]}, "health.xid", "reset_gpu", "2a:00"),
        ({"ecc_uncorrectable": {"3": 2}}, "health.ecc", "reset_gpu", "5d:00"),
        ({"remap": {"4": "pending"}}, "health.row_remap", "reset_gpu", "9a:00"),
        ({"remap": {"4": "failure"}}, "health.row_remap", "service", "9a:00"),
        ({"pcie_width": {"5": 8}}, "health.pcie_link", "drain", "ab:00"),
        ({"hw_slowdown": [6]}, "health.throttle", "drain", "ba:00"),
        ({"nvlink_down": {"0": [3]}}, "health.nvlink", "reset_gpu", "18:00"),
    ],
)
def test_each_injected_gpu_fault_is_caught_naming_gpu_and_action(
    tmp_path: Path, faults: dict[str, Any], cid: str, action: str, bus: str
) -> None:
    checks, _io = judge(tmp_path, described(faults))
    bad = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert list(bad) == [cid], {k: v["message"] for k, v in bad.items()}
    check = bad[cid]
    assert check["action"] == action and action in check["message"]
    (finding,) = check["findings"]
    assert bus in str(finding["gpu"]["bus_id"]).lower()
    if cid != "health.gpu_count":  # a GPU gone from nvidia-smi has no index or UUID any more
        assert str(finding["gpu"]["uuid"]).startswith("GPU-")
        assert finding["gpu"]["index"] is not None


def test_fabric_manager_dead_on_nvswitch(tmp_path: Path) -> None:
    checks, _io = judge(tmp_path, described(), fm_active=False)
    bad = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert list(bad) == ["health.fabric"]
    assert bad["health.fabric"]["action"] == "drain"
    assert "nvidia-fabricmanager is failed" in bad["health.fabric"]["message"]


def test_module_userspace_mismatch(tmp_path: Path) -> None:
    checks, _io = judge(tmp_path, described(), loaded="535.104.05")
    bad = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert list(bad) == ["health.driver_coherence"]
    assert bad["health.driver_coherence"]["action"] == "reboot"
    assert "535.129" in bad["health.driver_coherence"]["message"]


# ------------------------------------------------------------------------------ one fleet

SETUP = r"""
set -e
sed 's/@DRIVER_VERSION@/{version}/' > /usr/local/bin/nvidia-smi
chmod 0755 /usr/local/bin/nvidia-smi
python3 - <<'EOF'
import json
p = "/etc/fake-nvidia/gpus.json"
d = json.load(open(p))
d.update({update})
json.dump(d, open(p, "w"))
EOF
{extra}
"""


def test_fleet_check_names_each_faulty_gpu_and_keeps_every_host_unchanged(
    fleet_factory: Any, tmp_path: Path
) -> None:
    from test_roles_helpers import (  # noqa: PLC0415
        fingerprint,
        fingerprint_diff,
        fleet_args,
        provision_cli,
    )

    fleet = fleet_factory(5, profiles=("h100-sxm-8",) * 5)
    names = [h.name for h in fleet.hosts]
    no_switch = {"nvswitch": None, "driver": "loaded"}
    plan: dict[str, tuple[dict[str, Any], str]] = {
        # healthy (NVLink without NVSwitch: no fabric manager needed)
        names[0]: (no_switch, ""),
        # GPU 7 fell off the bus: still on lspci, gone from nvidia-smi, Xid 79 in the log
        names[1]: ({**no_switch, "faults": {"gone": [7], "xid": [{"gpu": 7, "xid": 79}]}}, ""),
        # one fault per GPU
        names[2]: (
            {
                **no_switch,
                "faults": {
                    "xid": [{"gpu": 1, "xid": 48}],
                    "ecc_uncorrectable": {"1": 2},
                    "remap": {"2": "pending", "3": "failure"},
                    "pcie_width": {"4": 8},
                    "hw_slowdown": [5],
                    "nvlink_down": {"6": [3]},
                },
            },
            "",
        ),
        # NVSwitch system whose fabric manager is dead
        names[3]: ({"driver": "loaded"}, ""),
        # the loaded module is not the userspace (an unattended upgrade without a reboot)
        names[4]: (
            {"driver": "auto"},
            "mkdir -p /run/fake-nvidia && printf '535.104.05\\nproprietary\\n' "
            "> /run/fake-nvidia/loaded",
        ),
    }
    smi = (PAYLOAD_DIR / "nvidia_smi.py").read_text(encoding="utf-8")
    for host, (update, extra) in plan.items():
        script = SETUP.format(version=VERSION, update=repr(update), extra=extra)
        res = fleet.run(host, f"bash -c {shlex.quote(script)} <<'SMI'\n{smi}\nSMI")
        assert res.rc == 0, res.stdout[-2000:]
    before = {h: fingerprint(fleet, h) for h in names}

    proc, data = provision_cli(tmp_path, "check", *fleet_args(fleet))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]

    def health_of(host: str) -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in data["hosts"][host]["checks"] if c["id"].startswith("health.")}

    ok = health_of(names[0])
    assert {k: v["status"] for k, v in ok.items() if v["status"] not in ("pass", "skip")} == {}
    assert ok["health.nvlink"]["status"] == "pass" and ok["health.xid"]["status"] == "pass"

    gone = health_of(names[1])
    assert gone["health.gpu_count"]["status"] == "fail"
    assert gone["health.gpu_count"]["action"] == "reboot"
    assert "db:00" in gone["health.gpu_count"]["message"]
    assert gone["health.xid"]["action"] == "reboot" and "Xid 79" in gone["health.xid"]["message"]

    many = health_of(names[2])
    want = {
        "health.xid": ("reset_gpu", "2a:00"),
        "health.ecc": ("reset_gpu", "2a:00"),
        "health.row_remap": ("service", "5d:00"),
        "health.pcie_link": ("drain", "9a:00"),
        "health.throttle": ("drain", "ab:00"),
        "health.nvlink": ("reset_gpu", "ba:00"),
    }
    for cid, (action, bus) in want.items():
        check = many[cid]
        assert check["status"] == "fail", check
        assert check["action"] == action, check
        assert any(bus in str(f["gpu"]["bus_id"]).lower() and str(f["gpu"]["uuid"]).startswith(
            "GPU-") for f in check["findings"]), check["findings"]
    assert any("3A:00" in f["gpu"]["bus_id"] and f["action"] == "reset_gpu"
               for f in many["health.row_remap"]["findings"])  # GPU 2's pending remap

    fabric = health_of(names[3])["health.fabric"]
    assert fabric["status"] == "fail" and fabric["action"] == "drain", fabric
    coherence = health_of(names[4])["health.driver_coherence"]
    assert coherence["status"] == "fail" and coherence["action"] == "reboot", coherence

    prom = (tmp_path / "report" / "provision.prom").read_text(encoding="utf-8")
    assert 'action="service"' in prom and f'host="{names[2]}"' in prom
    for host in names:
        diff = fingerprint_diff(before[host], fingerprint(fleet, host))
        assert diff == [], (host, diff[:40])
