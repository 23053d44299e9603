"""The simulated nvidia-smi and lspci, run locally against every shipped GPU description."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.payload import PAYLOAD_DIR
from lab.profiles import PROFILE_DIR, host_description, profile_names

REPO_ROOT = Path(__file__).resolve().parents[2]
GPU_FACTS = REPO_ROOT / "plugins" / "module_utils" / "gpu.py"  # gather(run), what the probe runs
QUERY = (
    "index,name,uuid,memory.total,pci.bus_id,persistence_mode,ecc.mode.current,"
    "mig.mode.current,driver_version,count,compute_cap"
)
EXPECTED = {
    # profile: (gpus, model, MiB, NVLink cell, nvswitches, lspci GPU id, lspci switch id)
    "h100-sxm-8": (8, "NVIDIA H100 80GB HBM3", 81559, "NV18", 4, "10de:2330", "10de:22a3"),
    "a100-sxm-8": (8, "NVIDIA A100-SXM4-80GB", 81920, "NV12", 6, "10de:20b2", "10de:1af1"),
    "rtx4090-4": (4, "NVIDIA GeForce RTX 4090", 24564, "PIX", 0, "10de:2684", None),
    "t4-1": (1, "Tesla T4", 15360, None, 0, "10de:1eb8", None),
    "nogpu": (0, None, None, None, 0, None, None),
}


def test_every_profile_has_expectations():
    assert sorted(EXPECTED) == profile_names()


class Sim:
    """Runs the payload programs with a description file and a module-state file."""

    def __init__(
        self,
        tmp_path: Path,
        profile: str,
        version: str = "535.129.03",
        loaded: str | None = "535.129.03",
        driver: str = "auto",
    ) -> None:
        self.config = tmp_path / "gpus.json"
        self.config.write_text(json.dumps(host_description(profile, "gpu01", driver)))
        self.loaded = tmp_path / "loaded"
        if loaded is not None:
            self.loaded.write_text(f"{loaded}\nproprietary\n")
        self.env = {
            "PATH": "/usr/bin:/bin",
            "FAKE_NVIDIA_CONFIG": str(self.config),
            "FAKE_NVIDIA_LOADED": str(self.loaded),
            "FAKE_NVIDIA_DRIVER_VERSION": version,
            "FAKE_NVIDIA_STATE": str(tmp_path / "state"),
        }

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        script = {"nvidia-smi": "nvidia_smi.py", "lspci": "lspci.py"}.get(argv[0])
        if script is None:
            return 127, "", f"{argv[0]}: command not found"
        proc = subprocess.run(
            [sys.executable, str(PAYLOAD_DIR / script), *argv[1:]],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_formats_per_profile(tmp_path, profile):
    count, model, mib, link, switches, gpu_id, switch_id = EXPECTED[profile]
    sim = Sim(tmp_path, profile)
    rc, out, _ = sim.run(["lspci", "-nn"])
    assert rc == 0
    assert len(re.findall(r"\[10de:[0-9a-f]{4}\]", out)) == count + switches
    if gpu_id:
        assert out.count(f"[{gpu_id}]") == count
    if switch_id:
        assert out.count("Bridge [0680]: NVIDIA Corporation") == switches
        assert out.count(f"[{switch_id}]") == switches
    if count == 0:
        rc, out, _ = sim.run(["nvidia-smi"])
        assert rc == 9
        assert "couldn't communicate with the NVIDIA driver" in out
        return

    rc, out, _ = sim.run(["nvidia-smi"])
    assert rc == 0
    assert re.search(
        r"^\| NVIDIA-SMI 535\.129\.03 +Driver Version: 535\.129\.03 +CUDA Version: 12\.2 +\|$",
        out,
        re.M,
    )
    assert all(len(line) == 89 for line in out.splitlines()[1:])
    assert out.count(f"{mib}MiB") == count

    rc, out, _ = sim.run(["nvidia-smi", "-L"])
    lines = out.splitlines()
    assert rc == 0 and len(lines) == count
    uuids = set()
    for i, line in enumerate(lines):
        m = re.match(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", line)
        assert m, line
        assert (int(m.group(1)), m.group(2)) == (i, model)
        uuids.add(m.group(3))
    assert len(uuids) == count

    rc, out, _ = sim.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv"])
    rows = out.splitlines()
    assert rc == 0 and len(rows) == count + 1
    assert rows[0].split(", ")[3] == "memory.total [MiB]"
    first = rows[1].split(", ")
    assert first[1] == model and first[3] == f"{mib} MiB" and first[8] == "535.129.03"
    assert first[9] == str(count) and re.fullmatch(r"\d\.\d", first[10])
    assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:00\.0", first[4])
    rc, out, _ = sim.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
    rows = [r.split(", ") for r in out.splitlines()]
    assert rc == 0 and len(rows) == count and rows[0][3] == str(mib)
    assert {r[5] for r in rows} == {"Disabled"}  # no nvidia-persistenced here
    if profile == "rtx4090-4":
        assert {r[6] for r in rows} == {"[N/A]"} and {r[7] for r in rows} == {"[N/A]"}

    rc, out, _ = sim.run(["nvidia-smi", "topo", "-m"])
    assert rc == 0
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in out
    assert "PIX  = Connection traversing at most a single PCIe bridge" in out
    gpu_rows = [r for r in out.splitlines() if re.match(r"^GPU\d+\t", r)]
    assert len(gpu_rows) == count
    if link:
        assert link in gpu_rows[0].split("\t")
    if profile == "rtx4090-4":
        assert "SYS" in gpu_rows[0].split("\t") and "NV" not in out.split("Legend")[0]

    rc, out, _ = sim.run(["nvidia-smi", "-q"])
    assert rc == 0 and out.count("Product Name") == count
    fabric = re.findall(r"^\s+State\s+: (.+)$", out, re.M)
    assert set(fabric) == ({"In Progress"} if switches else {"N/A"})


def test_unknown_query_field_is_exit_2(tmp_path):
    rc, out, _ = Sim(tmp_path, "t4-1").run(
        ["nvidia-smi", "--query-gpu=index,bogus", "--format=csv"]
    )
    assert rc == 2 and 'Field "bogus" is not a valid field to query.' in out


@pytest.mark.parametrize("case", ["no-description", "module-not-loaded", "described-not-loaded"])
def test_driver_not_loaded_is_exit_9(tmp_path, case):
    sim = Sim(
        tmp_path,
        "h100-sxm-8",
        loaded=None if case == "module-not-loaded" else "535.129.03",
        driver="not-loaded" if case == "described-not-loaded" else "auto",
    )
    if case == "no-description":
        sim.config.unlink()
    rc, out, _ = sim.run(["nvidia-smi", "-L"])
    assert rc == 9
    assert out.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    rc, _, _ = sim.run(["nvidia-smi", "--query-gpu=name", "--format=csv"])
    assert rc == 9


def test_userspace_newer_than_loaded_module_is_exit_18(tmp_path):
    sim = Sim(tmp_path, "a100-sxm-8", version="535.154.05", loaded="535.129.03")
    rc, out, _ = sim.run(["nvidia-smi"])
    assert rc == 18
    assert out.startswith("Failed to initialize NVML: Driver/library version mismatch")


def test_550_reports_cuda_12_4_and_persistence_flag(tmp_path):
    sim = Sim(tmp_path, "t4-1", version="550.54.15", loaded="550.54.15")
    rc, out, _ = sim.run(["nvidia-smi"])
    assert rc == 0 and "Driver Version: 550.54.15" in out and "CUDA Version: 12.4" in out
    rc, out, _ = sim.run(["nvidia-smi", "-pm", "1"])
    assert rc == 0 and "Enabled persistence mode" in out
    rc, out, _ = sim.run(["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"])
    assert out.strip() == "Enabled"


def _gpu_facts_module():
    if not GPU_FACTS.exists():
        pytest.fail(f"{GPU_FACTS} is missing")
    spec = importlib.util.spec_from_file_location("provision_gpu_facts", GPU_FACTS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_project_gpu_facts_parse_every_profile(tmp_path, profile):
    count, model, mib, link, switches, _gpu_id, _switch_id = EXPECTED[profile]
    facts = _gpu_facts_module().gather(Sim(tmp_path, profile).run)
    assert facts["gpu_count"] == count
    assert facts["nvswitch_count"] == switches
    if count == 0:
        # nvidia-smi exits 9 here (no GPU, so no module), and lspci shows no NVIDIA device
        assert facts["state"] in ("no_device", "driver_not_loaded")
        assert facts["pci_gpus"] == [] and facts["gpus"] == []
        assert facts["gpu_model"] is None and facts["driver_version"] is None
        return
    assert facts["state"] == "ok"
    assert facts["gpu_model"] == model
    assert [g["memory_mib"] for g in facts["gpus"]] == [mib] * count
    assert facts["driver_version"] == "535.129.03"
    assert facts["cuda_driver_version"] == "12.2"
    expected_link = (
        "nvlink" if link and link.startswith("NV") else ("pcie" if count > 1 else "none")
    )
    assert facts["topology"]["interconnect"] == expected_link


def test_project_gpu_facts_see_failure_modes(tmp_path):
    gather = _gpu_facts_module().gather
    assert gather(Sim(tmp_path, "h100-sxm-8", loaded=None).run)["state"] == "driver_not_loaded"
    assert (
        gather(Sim(tmp_path, "h100-sxm-8", version="535.154.05").run)["state"] == "version_mismatch"
    )


def test_profiles_are_valid_json_with_pci_ids():
    for path in PROFILE_DIR.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["name"] == path.stem
        if data["gpu"]:
            assert re.fullmatch(r"10de:[0-9a-f]{4}", data["gpu"]["pci_id"])
            assert len(data["bus_ids"]) == len(data["cpu_affinity"]) == len(data["numa"])
