"""A fake host for the probe's collectors: files, directories, links and command outputs.

Hosts are built from real captured outputs where a capture exists (tests/unit/fixtures/captures);
what no capture shows (the package listing of a whole host, nvidia-smi's machine-readable query) is
assembled in the documented format and says so.
"""

from __future__ import annotations

from typing import Any

import conftest
from ansible_collections.provision.gpu.plugins.module_utils import collect as c
from ansible_collections.provision.gpu.plugins.module_utils import evaluate as ev

KERNEL = "5.15.0-91-generic"
UBUNTU_2204 = conftest.capture("os-release__ubuntu_22.04.txt")
DEBIAN_11 = conftest.capture("os-release__debian_11.txt")
DEBIAN_12 = conftest.capture("os-release__debian_12.txt")
ROCKY_9 = conftest.capture("os-release__rocky_9.4.txt")
ROCKY_8 = conftest.capture("os-release__rocky_8.10.txt")
SMI_535 = conftest.capture("nvidia-smi__r535_8x_h100_sxm.txt")
SMI_MISMATCH = conftest.capture("nvidia-smi__nvml_mismatch_550.txt")
TOPO_H100 = conftest.capture("nvidia-smi-topo-m__8x_h100_sxm_nv18.txt")
# Assembled in the format of `--query-gpu=index,name,uuid,memory.total,pci.bus_id,persistence_mode,
# ecc.mode.current,mig.mode.current,driver_version --format=csv,noheader,nounits` (field
# formats from the captured csv outputs; no capture of exactly this field list exists).
QUERY_H100 = "\n".join(
    f"{i}, NVIDIA H100 80GB HBM3, GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b{i}, 81559, "
    f"00000000:{0x18 + i:02X}:00.0, {{pm}}, Enabled, Disabled, {{v}}"
    for i in range(8)
)
LSPCI_H100 = "\n".join(
    [
        f"{0x18 + i:02x}:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] "
        f"[10de:2330] (rev a1)"
        for i in range(8)
    ]
    + [
        f"{0x05 + i:02x}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)"
        for i in range(4)
    ]
)


class FakeHost(c.HostIO):
    def __init__(self, os_release: str = UBUNTU_2204, kernel: str = KERNEL, arch: str = "x86_64"):
        self.files: dict[str, str] = {"/etc/os-release": os_release, "/proc/modules": ""}
        self.bytes: dict[str, bytes] = {}
        self.dirs: set[str] = {"/", "/usr/local", f"/lib/modules/{kernel}"}
        self.links: dict[str, str] = {}
        self.homes: dict[str, str] = {"root": "/root"}  # the passwd database
        self.commands: dict[str, tuple[int, str, str]] = {}
        self.binaries: set[str] = {
            "dpkg-query",
            "apt-cache",
            "systemctl",
            "env",
            "ldconfig",
            "update-alternatives",
            "python3",
            "rpm",
            "lspci",
        }
        self.kernel, self.arch = kernel, arch
        self.free = 100 * 1024**3
        self.clock = 0.0
        self.ran: list[list[str]] = []

    # ---- HostIO
    def run(
        self, argv: list[str], timeout: float | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        self.ran.append(list(argv))
        key = " ".join(argv)
        for pattern in sorted(self.commands, key=len, reverse=True):
            if key.startswith(pattern):
                return self.commands[pattern]
        if argv[0] not in self.binaries and not argv[0].startswith("/"):
            return 127, "", f"{argv[0]}: command not found"
        return 1, "", ""

    def read(self, path: str) -> str | None:
        return self.files.get(path)

    def read_bytes(self, path: str) -> bytes | None:
        return self.bytes.get(path)

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs or path in self.links

    def isdir(self, path: str) -> bool:
        return path in self.dirs

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = {
            p[len(prefix) :].split("/")[0]
            for p in [*self.files, *self.dirs, *self.links]
            if p.startswith(prefix)
        }
        return sorted(n for n in names if n)

    def readlink(self, path: str) -> str | None:
        return self.links.get(path)

    def home(self, user: str) -> str | None:
        return self.homes.get(user)

    def realpath(self, path: str) -> str:
        seen = 0
        while path in self.links and seen < 10:
            path = self.links[path]
            seen += 1
        return path

    def free_bytes(self, path: str) -> int | None:
        return self.free

    def inode(self, path: str) -> tuple[int, int, int] | None:
        return (8, 1, abs(hash(path)) % 100000) if path in self.files else None

    def walk_files(self, top: str, pattern: str) -> list[str]:
        import re  # noqa: PLC0415

        return sorted(
            p
            for p in self.files
            if p.startswith(top + "/") and re.match(pattern, p.rsplit("/", 1)[1])
        )

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.binaries else None

    def uname(self) -> tuple[str, str]:
        return self.kernel, self.arch

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def now(self) -> float:
        return self.clock

    # ---- building blocks
    def dpkg(self, packages: dict[str, str], held: tuple[str, ...] = ()) -> FakeHost:
        """Installed packages (name -> version) as dpkg-query prints them (assembled)."""
        lines = [f"{n}|{v}|{'h' if n in held else 'i'}i " for n, v in packages.items()]
        self.commands["dpkg-query -W"] = (0, "\n".join(lines) + "\n", "")
        return self

    def gpus(
        self, version: str = "535.129.03", persistence: str = "Enabled", nvswitch: bool = True
    ) -> FakeHost:
        """8x H100: the R535 table capture with this version, the assembled query output."""
        table = SMI_535.replace("535.183.01", version)
        self.binaries.add("nvidia-smi")
        self.commands["nvidia-smi"] = (0, table, "")
        self.commands["nvidia-smi --query-gpu=index,name"] = (
            0,
            QUERY_H100.replace("{pm}", persistence).replace("{v}", version) + "\n",
            "",
        )
        self.commands["nvidia-smi --query-gpu=index,compute_cap"] = (
            0,
            "\n".join(f"{i}, 9.0" for i in range(8)) + "\n",
            "",
        )
        self.commands["nvidia-smi topo -m"] = (0, TOPO_H100, "")
        lspci = LSPCI_H100 if nvswitch else LSPCI_H100.split("\n0")[0]
        self.commands["lspci -nn"] = (0, lspci, "")
        return self

    def units(
        self,
        persistenced: dict[str, str],
        fabricmanager: dict[str, str] | None = None,
        fragment: str | None = None,
    ) -> FakeHost:
        def block(unit: str, props: dict[str, str]) -> str:
            return "\n".join([f"Id={unit}", *(f"{k}={v}" for k, v in props.items())])

        text = (
            block("nvidia-persistenced.service", persistenced)
            + "\n\n"
            + block("nvidia-fabricmanager.service", fabricmanager or {"LoadState": "not-found"})
        )
        self.commands["systemctl show"] = (0, text + "\n", "")
        if fragment is not None:
            self.files[persistenced.get("FragmentPath", "/lib/systemd/system/x.service")] = fragment
        return self


def role_default(role: str, name: str) -> Any:
    """A role variable's default, from the one schema (provisioner/data/role-variables.yml)."""
    from tools import rolegen  # noqa: PLC0415

    return rolegen.resolve_variables(rolegen.load_schema())[role][name]["default"]


# The fakes' GPU captures and package sets are of branch 535 (FakeHost.gpus() is 535.129.03, the
# recorded package lists are NVIDIA's and Canonical's 535 builds), so stack() asks for 535; a test
# of another branch says so (stack(**{"driver.branch": "580"})). The default stack's own branch
# (580) is tested in test_stack.py and on 580 captures (test_h200_device_check.py).
FAKES_BRANCH = "535"


def stack(**over: Any) -> dict[str, Any]:
    """gpu_stack_desired for the default stack (from the CLI's own mapping) on the fakes' branch
    (FAKES_BRANCH), with overrides in dotted form: stack(**{"driver.version": "535.129.03"})."""
    from provisioner import stack as stk  # noqa: PLC0415

    v = stk.resolve(None).to_extravars()
    desired: dict[str, Any] = {
        "host": "gpu01",
        "driver": {
            "branch": FAKES_BRANCH,
            "version": v["gpu_stack_driver_version"],
            "flavor": v["gpu_stack_driver_flavor"],
            "fabricmanager": v["gpu_stack_driver_fabricmanager"],
            "persistence": True,
            "secure_boot_signed": False,
            "hold": True,
            "support": v["gpu_stack_driver_support"],
        },
        "cuda": {
            "version": v["gpu_stack_cuda_version"],
            "min_driver": v["gpu_stack_cuda_min_driver"],
            "distros": v["gpu_stack_cuda_distros"],
            "set_default": True,
        },
        "cudnn": {
            "version": v["gpu_stack_cudnn_version"],
            "build": v["gpu_stack_cudnn_build"],
            "hold": True,
        },
        "nccl": {
            "version": v["gpu_stack_nccl_version"],
            "build": v["gpu_stack_nccl_build"],
            "hold": True,
        },
        "pytorch": {
            "version": v["gpu_stack_pytorch_version"],
            "build": v["gpu_stack_pytorch_build"],
            "venv": v["gpu_stack_pytorch_venv"],
            "torchvision": "",
            "torchaudio": "",
            "python": "python3",
            "python_range": v["gpu_stack_pytorch_python_range"],
            "require_cuda": True,
            "index_url": v["gpu_stack_mirrors_pytorch_index"],
            "find_links": "",
        },
        "mirrors": {"nvidia_repo": v["gpu_stack_mirrors_nvidia_repo"], "carries": []},
        "repo": {"keyring_version": "1.1-1", "key_fingerprints": role_default(
            "gpu_stack", "gpu_stack_repo_key_fingerprints")},
        "env": {"profile_file": "/etc/profile.d/cuda.sh", "neutralize_foreign": True},
        "preflight": {
            "require_gpu": True,
            "min_free_gib": 20,
            "disk_path": "/usr/local",
            "kernel_headers": "auto",
        },
        "kernel_modules": "auto",
        "health": {"expected_gpus": 0},
        "dcgm": {
            "diag_level": v["gpu_stack_dcgm_diag_level"],
            "diag_timeout_s": v["gpu_stack_dcgm_diag_timeout_s"],
        },
    }
    for key, value in over.items():
        node = desired
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    return desired


def judge(
    host: FakeHost,
    components: list[str],
    desired: dict[str, Any] | None = None,
    *,
    check_mode: bool = False,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """collect + evaluate, as the module does (params: extra module-computed parameters)."""
    desired = desired or stack()
    probe_params: dict[str, Any] = {
        "disk_path": desired["preflight"]["disk_path"],
        "cuda_version": desired["cuda"]["version"],
        "env_profile_file": desired["env"]["profile_file"],
        "env_users": desired["env"].get("users") or ["root"],
        "pytorch_python": desired["pytorch"]["python"],
        "pytorch_venv": desired["pytorch"]["venv"],
        "dcgm_level": (desired.get("dcgm") or {}).get("diag_level"),
        "dcgm_timeout_s": (desired.get("dcgm") or {}).get("diag_timeout_s"),
    }
    probe_params.update(params or {})
    facts = c.collect(
        ev.sections_for(components),
        probe_params,
        host,
        policy_names=lambda plat: [
            plat.toolkit_package(desired["cuda"]["version"]),
            f"cuda-drivers-{desired['driver']['branch']}",
            *plat.kernel_headers(),
        ],
    )
    result = ev.evaluate(components, facts, desired, check_mode=check_mode)
    result["by_id"] = {x["id"]: x for x in result["checks"]}
    result["facts"] = facts
    return result
