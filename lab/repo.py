"""The fake NVIDIA CUDA network repository: NVIDIA's package names and versions, signed like theirs.

`build_repo(root, base_url, cache)` writes <root>/compute/cuda/repos/debian12/x86_64/ with the
.debs, Packages(.gz), Release, InRelease, Release.gpg and cuda-keyring_1.1-1_all.deb, signed with a
fresh throwaway key (its public half is what cuda-keyring installs). Payloads are simulations:
nvidia-smi and friends are small Python programs, libraries are real one-function ELF objects
with the right sonames so that `ldconfig -p` lists them.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lab import payload
from lab.debs import Deb, shared_object
from lab.util import clean_env, run

REPO_SUBDIR = "compute/cuda/repos"
DISTRO_ARCH = "debian12/x86_64"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
SOURCES_FILE = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# driver branch -> versions shipped (oldest first)
DRIVER_VERSIONS: dict[str, list[str]] = {"535": ["535.129.03", "535.154.05"], "550": ["550.54.15"]}


@dataclass(frozen=True)
class Toolkit:
    major_minor: str  # "12.1"
    version: str  # package version of cuda-toolkit-X-Y (12.1.1)
    nvcc: str  # 12.1.105
    cudart: str
    built_on: str
    build: str
    min_driver: str  # cuda-runtime-X-Y -> cuda-drivers (>= this)

    @property
    def dashed(self) -> str:
        return self.major_minor.replace(".", "-")

    @property
    def prefix(self) -> str:
        return f"/usr/local/cuda-{self.major_minor}"

    @property
    def priority(self) -> str:
        return self.major_minor.replace(".", "")


TOOLKITS = (
    Toolkit(
        "12.1",
        "12.1.1",
        "12.1.105",
        "12.1.105",
        "Mon_Apr__3_17:16:06_PDT_2023",
        "cuda_12.1.r12.1/compiler.32688072_0",
        "530.30.02",
    ),
    Toolkit(
        "12.4",
        "12.4.1",
        "12.4.131",
        "12.4.127",
        "Thu_Mar_28_02:18:24_PDT_2024",
        "cuda_12.4.r12.4/compiler.34097967_0",
        "550.54.15",
    ),
)
CUDNN8 = ("8.9.2.26-1+cuda12.1", "8.9.2.26-1+cuda12.4", "8.9.0.131-1+cuda12.1")
NCCL = ("2.18.3-1+cuda12.1", "2.18.3-1+cuda12.4", "2.18.1-1+cuda12.1")
CUDNN9 = "9.1.0.70-1"


@dataclass(frozen=True)
class Repo:
    """A built repository."""

    root: Path  # what the HTTP server serves
    base_url: str  # http://127.0.0.1:PORT  (no trailing slash)

    @property
    def dir(self) -> Path:
        return self.root / REPO_SUBDIR / DISTRO_ARCH

    @property
    def repos_url(self) -> str:
        """The `nvidia_repo_base_url` value: ends in /compute/cuda/repos."""
        return f"{self.base_url}/{REPO_SUBDIR}"

    @property
    def keyring_url(self) -> str:
        return f"{self.repos_url}/{DISTRO_ARCH}/cuda-keyring_1.1-1_all.deb"


# ------------------------------------------------------------------------------------ drivers
def _other_branches(branch: str) -> list[str]:
    return [b for b in DRIVER_VERSIONS if b != branch]


def _exclusive(deb: Deb, branch: str, *also: str) -> None:
    """Packages of different branches (and the given names) conflict with and replace each other."""
    base = deb.name.removesuffix(f"-{branch}")
    names = [f"{base}-{b}" for b in _other_branches(branch)] + list(also)
    deb.conflicts += names
    deb.replaces += names


def _module_deb(name: str, branch: str, version: str, flavor: str) -> Deb:
    pkgver = f"{version}-0ubuntu1"
    kind = "open GPU kernel modules" if flavor == "open" else "kernel module source (DKMS)"
    deb = Deb(
        name,
        pkgver,
        f"NVIDIA {kind}, simulated (no real module is built)",
        section="multiverse/kernel",
    )
    other = f"nvidia-kernel-open-{branch}" if flavor == "proprietary" else f"nvidia-dkms-{branch}"
    _exclusive(
        deb,
        branch,
        other,
        *(
            f"{n}-{b}"
            for b in _other_branches(branch)
            for n in ("nvidia-dkms", "nvidia-kernel-open")
        ),
    )
    deb.conflicts = sorted(set(deb.conflicts))
    deb.replaces = sorted(set(deb.replaces))
    deb.add_text(
        f"/usr/src/nvidia-{version}/dkms.conf",
        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\n# flavor: {flavor}\n',
    )
    deb.add_text(f"/usr/src/nvidia-{version}/FLAVOR", flavor + "\n")
    deb.add_text(
        "/usr/lib/fake-nvidia/load-module",
        (
            "#!/bin/sh\n"
            "# boot-time stand-in for `modprobe nvidia`: the installed module is loaded\n"
            "mkdir -p /run/fake-nvidia\n"
            f"printf '%s\\n%s\\n' {version} {flavor} > /run/fake-nvidia/loaded\n"
        ),
        0o755,
    )
    deb.add_text(
        "/lib/systemd/system/fake-nvidia-module.service",
        (
            "[Unit]\nDescription=Load the NVIDIA kernel module (simulated)\n"
            "DefaultDependencies=no\n"
            "After=local-fs.target\nBefore=sysinit.target nvidia-persistenced.service "
            "nvidia-fabricmanager.service\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            "ExecStart=/usr/lib/fake-nvidia/load-module\n\n[Install]\nWantedBy=sysinit.target\n"
        ),
    )
    deb.symlinks["/lib/systemd/system/sysinit.target.wants/fake-nvidia-module.service"] = (
        "../fake-nvidia-module.service"
    )
    deb.scripts["postinst"] = (
        '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
        '  for d in /lib/modules/*/; do\n    [ -d "$d" ] || continue\n'
        '    mkdir -p "$d/updates/dkms"\n'
        f"    echo 'simulated nvidia.ko {version} {flavor}' > \"$d/updates/dkms/nvidia.ko\"\n"
        "  done\n"
        f"  mkdir -p /var/lib/dkms/nvidia/{version}\n"
        "  # stands in for the modprobe the lab turns off: load it if nothing is loaded yet\n"
        "  if [ ! -s /run/fake-nvidia/loaded ]; then /usr/lib/fake-nvidia/load-module; fi\n"
        "fi\nexit 0\n"
    )
    deb.scripts["prerm"] = (
        "#!/bin/sh\nset -e\n"
        "rm -f /lib/modules/*/updates/dkms/nvidia.ko\n"
        f"rm -rf /var/lib/dkms/nvidia/{version}\nexit 0\n"
    )
    return deb


def _driver_debs(branch: str, version: str, cache: Path) -> Iterator[Deb]:
    pkgver = f"{version}-0ubuntu1"
    smi = payload.read("nvidia_smi.py").replace('"@DRIVER_VERSION@"', f'"{version}"')
    utils = Deb(
        f"nvidia-utils-{branch}",
        pkgver,
        "NVIDIA driver support binaries (nvidia-smi)",
        depends=["python3"],
    )
    _exclusive(utils, branch)
    utils.add_text("/usr/bin/nvidia-smi", smi, 0o755)
    yield utils

    compute = Deb(
        f"libnvidia-compute-{branch}",
        pkgver,
        "NVIDIA libcompute package (libcuda, NVML)",
        section="multiverse/libs",
        ldconfig_trigger=True,
    )
    _exclusive(compute, branch)
    for lib, symbol in (
        ("libcuda", "cuDriverGetVersion_fake"),
        ("libnvidia-ml", "nvmlVersion_fake"),
    ):
        compute.add_bytes(
            f"{LIBDIR}/{lib}.so.{version}",
            shared_object(cache, f"{lib}.so.1", symbol.replace("-", "_"), version),
        )
        compute.symlinks[f"{LIBDIR}/{lib}.so.1"] = f"{lib}.so.{version}"
    yield compute

    yield _module_deb(f"nvidia-dkms-{branch}", branch, version, "proprietary")
    yield _module_deb(f"nvidia-kernel-open-{branch}", branch, version, "open")

    driver = Deb(
        f"nvidia-driver-{branch}",
        pkgver,
        "NVIDIA driver metapackage",
        depends=[
            f"nvidia-utils-{branch} (= {pkgver})",
            f"libnvidia-compute-{branch} (= {pkgver})",
            f"nvidia-dkms-{branch} (= {pkgver}) | nvidia-kernel-open-{branch} (= {pkgver})",
        ],
    )
    _exclusive(driver, branch)
    yield driver

    fm = Deb(
        f"nvidia-fabricmanager-{branch}",
        f"{version}-1",
        "Fabric Manager for NVSwitch based systems",
    )
    _exclusive(fm, branch)
    fm.add_text(
        "/usr/bin/nv-fabricmanager",
        payload.read("fabricmanager.py").replace('"@DRIVER_VERSION@"', f'"{version}"'),
        0o755,
    )
    fm.add_text(
        "/usr/share/nvidia/nvswitch/fabricmanager.cfg",
        "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\nFABRIC_MODE=0\n",
    )
    fm.conffiles.append("/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    fm.add_text(
        "/lib/systemd/system/nvidia-fabricmanager.service",
        (
            "[Unit]\nDescription=NVIDIA fabric manager service\nAfter=network-online.target\n"
            "Wants=network-online.target\n\n[Service]\nUser=root\nPrivateTmp=false\nType=forking\n"
            "TimeoutStartSec=240\nPIDFile=/run/nvidia-fabricmanager/nv-fabricmanager.pid\n"
            "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
            "LimitCORE=infinity\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
    )
    yield fm

    meta = Deb(
        f"cuda-drivers-{branch}",
        f"{version}-1",
        f"CUDA Driver meta-package, branch {branch}",
        depends=[f"nvidia-driver-{branch} (= {pkgver})"],
    )
    _exclusive(meta, branch)
    yield meta
    fm_meta = Deb(
        f"cuda-drivers-fabricmanager-{branch}",
        f"{version}-1",
        "Fabric Manager meta-package",
        depends=[f"nvidia-fabricmanager-{branch} (= {version}-1)"],
    )
    _exclusive(fm_meta, branch)
    yield fm_meta
    yield Deb(
        "cuda-drivers",
        f"{version}-1",
        "CUDA Driver meta-package, newest branch",
        depends=[f"cuda-drivers-{branch} (= {version}-1)"],
    )

    persist = Deb(
        "nvidia-persistenced", f"{version}-1", "NVIDIA Persistence Daemon", depends=["python3"]
    )
    persist.add_text("/usr/bin/nvidia-persistenced", payload.read("persistenced.py"), 0o755)
    persist.add_text(
        "/lib/systemd/system/nvidia-persistenced.service",
        (
            "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n[Service]\n"
            "Type=forking\nPIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid\nRestart=always\n"
            "ExecStart=/usr/bin/nvidia-persistenced --verbose\n"
            "ExecStopPost=/bin/rm -rf /run/nvidia-persistenced\n\n"
            "[Install]\nWantedBy=multi-user.target\n"
        ),
    )
    yield persist


def _driver_set(branch: str, version: str, cache: Path) -> Iterator[Deb]:
    """The driver packages of one version; those built from one source share a Source field."""
    for deb in _driver_debs(branch, version, cache):
        if deb.version.endswith("-0ubuntu1"):
            deb.source = f"nvidia-graphics-drivers-{branch} ({deb.version})"
        yield deb


# ------------------------------------------------------------------------------------ toolkits
def _toolkit_debs(tk: Toolkit, cache: Path) -> Iterator[Deb]:
    lib = f"{tk.prefix}/targets/x86_64-linux/lib"
    config = Deb(
        f"cuda-toolkit-{tk.dashed}-config-common",
        f"{tk.cudart}-1",
        f"Common config package for CUDA Toolkit {tk.major_minor}",
    )
    config.scripts["postinst"] = (
        '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
        f"  update-alternatives --install /usr/local/cuda cuda {tk.prefix} {tk.priority}\n"
        f"  update-alternatives --install /usr/local/cuda-12 cuda-12 {tk.prefix} {tk.priority}\n"
        "fi\nexit 0\n"
    )
    config.scripts["prerm"] = (
        '#!/bin/sh\nset -e\nif [ "$1" = remove ] || [ "$1" = deconfigure ]; then\n'
        f"  update-alternatives --remove cuda {tk.prefix}\n"
        f"  update-alternatives --remove cuda-12 {tk.prefix}\nfi\nexit 0\n"
    )
    yield config

    cudart = Deb(
        f"cuda-cudart-{tk.dashed}",
        f"{tk.cudart}-1",
        "CUDA Runtime native Libraries",
        depends=[
            f"cuda-toolkit-{tk.dashed}-config-common",
            "cuda-toolkit-12-config-common",
            "cuda-toolkit-config-common",
        ],
        ldconfig_trigger=True,
    )
    cudart.add_bytes(
        f"{lib}/libcudart.so.{tk.cudart}",
        shared_object(cache, "libcudart.so.12", "cudaRuntimeGetVersion_fake", tk.cudart),
    )
    cudart.symlinks[f"{lib}/libcudart.so.12"] = f"libcudart.so.{tk.cudart}"
    cudart.symlinks[f"{tk.prefix}/lib64"] = "targets/x86_64-linux/lib"
    yield cudart

    nvcc = Deb(
        f"cuda-nvcc-{tk.dashed}",
        f"{tk.nvcc}-1",
        "CUDA nvcc",
        depends=[f"cuda-toolkit-{tk.dashed}-config-common"],
    )
    nvcc.add_text(
        f"{tk.prefix}/bin/nvcc",
        (
            "#!/bin/sh\ncase \"$1\" in\n  --version|-V)\n    cat <<'EOF'\n"
            "nvcc: NVIDIA (R) Cuda compiler driver\n"
            "Copyright (c) 2005-2024 NVIDIA Corporation\n".replace("2024", tk.built_on[-4:])
            + f"Built on {tk.built_on}\n"
            f"Cuda compilation tools, release {tk.major_minor}, V{tk.nvcc}\nBuild {tk.build}\nEOF\n"
            "    exit 0 ;;\nesac\n"
            "echo 'nvcc fatal   : No input files specified; "
            "use option --help for more information' >&2\n"
            "exit 1\n"
        ),
        0o755,
    )
    yield nvcc

    toolkit = Deb(
        f"cuda-toolkit-{tk.dashed}",
        f"{tk.version}-1",
        f"CUDA Toolkit {tk.major_minor} meta-package (does not include the driver)",
        depends=[
            f"cuda-nvcc-{tk.dashed} (>= {tk.nvcc})",
            f"cuda-cudart-{tk.dashed} (>= {tk.cudart})",
            f"cuda-toolkit-{tk.dashed}-config-common",
        ],
    )
    toolkit.add_text(
        f"{tk.prefix}/version.json",
        json.dumps(
            {
                "cuda": {"name": "CUDA SDK", "version": tk.version},
                "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": tk.cudart},
                "cuda_nvcc": {"name": "CUDA NVCC", "version": tk.nvcc},
            },
            indent=3,
        )
        + "\n",
    )
    yield toolkit

    # the traps: cuda-X-Y pulls the runtime, which pulls the newest driver branch
    yield Deb(
        f"cuda-runtime-{tk.dashed}",
        f"{tk.version}-1",
        f"CUDA Runtime {tk.major_minor} meta-package",
        depends=[f"cuda-drivers (>= {tk.min_driver})", f"cuda-cudart-{tk.dashed} (>= {tk.cudart})"],
    )
    yield Deb(
        f"cuda-{tk.dashed}",
        f"{tk.version}-1",
        f"CUDA {tk.major_minor} meta-package (pulls the driver)",
        depends=[
            f"cuda-runtime-{tk.dashed} (>= {tk.version})",
            f"cuda-toolkit-{tk.dashed} (>= {tk.version})",
        ],
    )
    yield Deb(
        "cuda",
        f"{tk.version}-1",
        "CUDA meta-package: the newest toolkit and driver",
        depends=[f"cuda-{tk.dashed} (>= {tk.version})"],
    )


def _common_config_debs() -> Iterator[Deb]:
    newest = TOOLKITS[-1]
    conf = Deb(
        "cuda-toolkit-config-common", f"{newest.cudart}-1", "Common config package for CUDA Toolkit"
    )
    conf.add_text("/etc/ld.so.conf.d/000_cuda.conf", "/usr/local/cuda/targets/x86_64-linux/lib\n")
    yield conf
    conf12 = Deb(
        "cuda-toolkit-12-config-common",
        f"{newest.cudart}-1",
        "Common config package for CUDA Toolkit 12",
    )
    conf12.add_text(
        "/etc/ld.so.conf.d/988_cuda-12.conf", "/usr/local/cuda-12/targets/x86_64-linux/lib\n"
    )
    yield conf12


# ------------------------------------------------------------------------------------ libraries
def _split(version: str) -> tuple[list[int], str]:
    upstream, _, cuda = version.partition("+cuda")
    nums = [int(x) for x in upstream.split("-")[0].split(".")]
    return nums, cuda


def _cudnn_debs(cache: Path) -> Iterator[Deb]:
    for version in CUDNN8:
        nums, cuda = _split(version)
        short = ".".join(map(str, nums[:3]))
        lib = Deb(
            "libcudnn8",
            version,
            f"cuDNN runtime libraries (for CUDA {cuda})",
            section="multiverse/libs",
            ldconfig_trigger=True,
        )
        lib.add_bytes(
            f"{LIBDIR}/libcudnn.so.{short}",
            shared_object(cache, "libcudnn.so.8", "cudnnGetVersion_fake", version),
        )
        lib.symlinks[f"{LIBDIR}/libcudnn.so.8"] = f"libcudnn.so.{short}"
        yield lib
        dev = Deb(
            "libcudnn8-dev",
            version,
            f"cuDNN development headers (for CUDA {cuda})",
            section="multiverse/libdevel",
            depends=[f"libcudnn8 (= {version})"],
        )
        dev.add_text(
            "/usr/include/x86_64-linux-gnu/cudnn_version_v8.h",
            (
                "#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n\n"
                f"#define CUDNN_MAJOR {nums[0]}\n#define CUDNN_MINOR {nums[1]}\n"
                f"#define CUDNN_PATCHLEVEL {nums[2]}\n\n"
                "#define CUDNN_VERSION "
                "(CUDNN_MAJOR * 1000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n\n"
                "#endif /* CUDNN_VERSION_H */\n"
            ),
        )
        dev.symlinks["/usr/include/cudnn_version.h"] = "x86_64-linux-gnu/cudnn_version_v8.h"
        dev.symlinks[f"{LIBDIR}/libcudnn.so"] = "libcudnn.so.8"
        yield dev
    nums, _ = _split(CUDNN9)
    lib9 = Deb(
        "libcudnn9-cuda-12",
        CUDNN9,
        "cuDNN 9 runtime libraries for CUDA 12",
        section="multiverse/libs",
        ldconfig_trigger=True,
    )
    lib9.add_bytes(
        f"{LIBDIR}/libcudnn.so.9.1.0",
        shared_object(cache, "libcudnn.so.9", "cudnnGetVersion_fake", CUDNN9),
    )
    lib9.symlinks[f"{LIBDIR}/libcudnn.so.9"] = "libcudnn.so.9.1.0"
    yield lib9
    dev9 = Deb(
        "libcudnn9-dev-cuda-12",
        CUDNN9,
        "cuDNN 9 development files for CUDA 12",
        depends=[f"libcudnn9-cuda-12 (= {CUDNN9})"],
    )
    dev9.add_text(
        "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h",
        (
            f"#define CUDNN_MAJOR {nums[0]}\n#define CUDNN_MINOR {nums[1]}\n"
            f"#define CUDNN_PATCHLEVEL {nums[2]}\n"
        ),
    )
    yield dev9
    yield Deb(
        "cudnn9-cuda-12",
        CUDNN9,
        "cuDNN 9 meta-package for CUDA 12",
        depends=[f"libcudnn9-cuda-12 (= {CUDNN9})", f"libcudnn9-dev-cuda-12 (= {CUDNN9})"],
    )


def _nccl_debs(cache: Path) -> Iterator[Deb]:
    for version in NCCL:
        nums, cuda = _split(version)
        short = ".".join(map(str, nums[:3]))
        lib = Deb(
            "libnccl2",
            version,
            f"NVIDIA Collective Communication Library (NCCL) Runtime (CUDA {cuda})",
            section="libs",
            ldconfig_trigger=True,
        )
        lib.add_bytes(
            f"{LIBDIR}/libnccl.so.{short}",
            shared_object(cache, "libnccl.so.2", "ncclGetVersion_fake", version),
        )
        lib.symlinks[f"{LIBDIR}/libnccl.so.2"] = f"libnccl.so.{short}"
        yield lib
        dev = Deb(
            "libnccl-dev",
            version,
            f"NCCL development files (CUDA {cuda})",
            section="libdevel",
            depends=[f"libnccl2 (= {version})"],
        )
        code = nums[0] * 10000 + nums[1] * 100 + nums[2]
        dev.add_text(
            "/usr/include/nccl.h",
            (
                "#ifndef NCCL_H_\n#define NCCL_H_\n\n"
                f"#define NCCL_MAJOR {nums[0]}\n#define NCCL_MINOR {nums[1]}\n"
                f"#define NCCL_PATCH {nums[2]}\n"
                '#define NCCL_SUFFIX ""\n\n'
                f"#define NCCL_VERSION_CODE {code}\n"
                "#define NCCL_VERSION(X,Y,Z) "
                "(((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
                "(X) * 10000 + (Y) * 100 + (Z))\n\n#endif\n"
            ),
        )
        dev.symlinks[f"{LIBDIR}/libnccl.so"] = "libnccl.so.2"
        yield dev


def _keyring_deb(keyring: bytes, base_url: str) -> Deb:
    deb = Deb(
        "cuda-keyring",
        "1.1-1",
        "GPG keyring for the CUDA repository",
        arch="all",
        section="non-free/admin",
    )
    deb.add_bytes(KEYRING, keyring)
    deb.add_text(
        SOURCES_FILE, f"deb [signed-by={KEYRING}] {base_url}/{REPO_SUBDIR}/{DISTRO_ARCH}/ /\n"
    )
    deb.conffiles.append(SOURCES_FILE)
    return deb


def all_debs(cache: Path) -> list[Deb]:
    """Every package of the repository except cuda-keyring."""
    debs: list[Deb] = []
    for branch, versions in DRIVER_VERSIONS.items():
        for version in versions:
            debs += _driver_set(branch, version, cache)
    debs += _common_config_debs()
    for tk in TOOLKITS:
        debs += _toolkit_debs(tk, cache)
    debs += _cudnn_debs(cache)
    debs += _nccl_debs(cache)
    return debs


# ------------------------------------------------------------------------------------ build + sign
def _gpg(home: Path, *args: str) -> None:
    run(["gpg", "--batch", "--quiet", "--homedir", home, *args], env=clean_env(GNUPGHOME=str(home)))


def build_repo(root: Path, base_url: str, cache: Path, label: str = "NVIDIA CUDA") -> Repo:
    """Build and sign the repository under root; base_url is where root is served."""
    base_url = base_url.rstrip("/")
    out = root / REPO_SUBDIR / DISTRO_ARCH
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="provision-lab-repo-") as tmpname:
        tmp = Path(tmpname)
        home = tmp / "gnupg"
        home.mkdir(mode=0o700)
        _gpg(
            home,
            "--passphrase",
            "",
            "--quick-gen-key",
            "cudatools (provision lab throwaway key) <cudatools@nvidia.invalid>",
            "ed25519",
            "sign",
            "1d",
        )
        keyring = tmp / "cuda-archive-keyring.gpg"
        _gpg(home, "--output", str(keyring), "--export")
        work = tmp / "build"
        work.mkdir()
        for deb in all_debs(cache):
            deb.build(out, work)
        _keyring_deb(keyring.read_bytes(), base_url).build(out, work)
        packages = run(["apt-ftparchive", "packages", "."], cwd=out).stdout
        (out / "Packages").write_text(packages, encoding="utf-8")
        with gzip.open(out / "Packages.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
            fh.write(packages)
        release = run(
            [
                "apt-ftparchive",
                "-o",
                "APT::FTPArchive::Release::Origin=NVIDIA",
                "-o",
                f"APT::FTPArchive::Release::Label={label}",
                "-o",
                "APT::FTPArchive::Release::Description=Fake NVIDIA CUDA repository",
                "release",
                ".",
            ],
            cwd=out,
        ).stdout
        (tmp / "Release").write_text(release, encoding="utf-8")
        shutil.move(tmp / "Release", out / "Release")
        _gpg(home, "--clearsign", "-o", str(out / "InRelease"), str(out / "Release"))
        _gpg(home, "-abs", "-o", str(out / "Release.gpg"), str(out / "Release"))
        pub = run(
            ["gpg", "--homedir", home, "--armor", "--export"], env=clean_env(GNUPGHOME=str(home))
        ).stdout
        (out / "cuda-archive-keyring.asc").write_text(pub, encoding="utf-8")
        run(["gpgconf", "--homedir", home, "--kill", "all"], env=clean_env(GNUPGHOME=str(home)))
    return Repo(root=root, base_url=base_url)
