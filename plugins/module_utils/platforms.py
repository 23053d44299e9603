# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""What differs per operating system: supported releases, NVIDIA's repository directory, package
names and version strings, the driver family, pins and holds, kernel headers.

Runs on the target (Python 3.8+): standard library only. Every name here is public packaging, with
the source next to it:
  U1 canonical/nvidia-graphics-drivers:debian/templates/control.in (535-jammy): nvidia-driver-<B>
     and its components, exact (=) dependencies, nvidia-compute-utils-<B> Provides+Conflicts
     nvidia-persistenced, the -open and -server flavours, nvidia-firmware-<B>-<V>.
  U2 NVIDIA/ansible-role-nvidia-driver:defaults/main.yml (cuda-drivers-<branch>);
     dstackai/dstack#2355 (cuda-drivers-535 has only >= dependencies: pinning it pins nothing).
  U3 NVIDIA/apt-packaging-fabric-manager:debian/templates/control.in, NVIDIA/gpu-driver-container:
     ubuntu22.04/install.sh (nvidia-fabricmanager-<B>=<V>-1, libnvidia-nscq-<B>=<V>-1).
  U4 Ubuntu kernel release cycle (https://ubuntu.com/about/release-cycle#ubuntu-kernel-release-cycle:
     GA kernels 5.4 for 20.04, 5.15 for 22.04, 6.8 for 24.04; later series are HWE kernels);
     dpkg listings of 22.04 hosts on 6.8.0-*-generic with linux-headers-generic-hwe-22.04
     6.8.0-*~22.04.1 beside linux-headers-generic 5.15.0.* (public forum threads, P).
  U5 Debian/apt:apt-pkg/policy.cc (pkgPolicy::CreatePin: a version takes the pin of the first
     specific record that matches it, "the first specific stanza for a package is the ruler");
     the Release file's Origin field: Ubuntu in
     http://archive.ubuntu.com/ubuntu/dists/jammy-updates/Release.
  U6 NVIDIA's own 580 builds in its ubuntu2204 repository (file names in public package
     manifests: nvidia-firmware-580_580.65.06-0ubuntu1, libnvidia-gpucomp-580_...,
     nvidia-persistenced_580.65.06-0ubuntu1 beside nvidia-compute-utils-580_...), and
     NVIDIA/gpu-driver-container#451 (nvidia-fabricmanager 580.65.06-1 provides
     nvidia-fabricmanager-580), #735 (nv-fabricmanager 590.48.01 installed beside driver 580).
  D1 GoogleCloudDataproc/initialization-actions#1400 and gpu/install_gpu_driver.sh (Debian:
     nvidia-driver-cuda with nvidia-kernel-dkms / nvidia-kernel-open-dkms; contrib),
     NVIDIA/nvidia-docker#1791 (cuda-drivers pulls nvidia-driver on Debian).
  R1 NVIDIA/yum-packaging-precompiled-kmod:README.md, NVIDIA/cuda-repo-management:genmodules.py
     (dnf module streams <B>-dkms, <B>-open; profiles default, fm),
     NVIDIA/ansible-role-nvidia-driver:tasks/install-redhat.yml (@nvidia-driver:<B>-dkms).
  R3 NVIDIA/gpu-driver-container:rhel9/install.sh (`dnf module enable nvidia-driver:<B>-dkms`, then
     `dnf install nvidia-fabric-manager-<V>`: an exact version named inside the enabled stream);
     genmodules.py lists every version of the branch's packages in the stream but only the newest
     kmod-nvidia-latest-dkms / kmod-nvidia-open-dkms, so only the branch's newest version has a
     kernel module package dnf will install (older kmods are hidden by modular filtering).
  R2 ansible/ansible#83357, #84769 and nodejs/build#4124: ansible-core >= 2.17 cannot manage
     packages on EL8 (the dnf bindings exist only for platform-python 3.6).
  L1 cuDNN 8 packages libcudnn8/libcudnn8-dev "<v>-1+cuda12.1" (deb) and "<v>-1.cuda12.1" (rpm);
     NCCL libnccl2/libnccl-dev (deb), libnccl/libnccl-devel (rpm), "<v>-1+cuda12.1": public
     Dockerfiles and install scripts (nvidia/container-images, pytorch/builder), and captured rpm
     names (tests/unit/fixtures/captures/SOURCES.md).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any

# BEGIN GENERATED SUPPORT (make roles, from provisioner/data/support.yml)
# Releases preflight.os accepts (os-release ID -> VERSION_ID for Ubuntu, the
# major elsewhere), and the ones it refuses ((family, version) -> the reason).
SUPPORTED = {
    "ubuntu": ("20.04", "22.04", "24.04"),
    "debian": ("11", "12"),
    "rhel": ("9",),
    "rocky": ("9",),
    "almalinux": ("9",),
}
REFUSED = {
    ("redhat", "8"): (
        "EL8 is not supported: ansible-core 2.17 and newer cannot manage "
        "packages there (the dnf bindings exist only for "
        "/usr/libexec/platform-python 3.6, which they no longer run: "
        "ansible/ansible#83357, #84769); use EL9, or ansible-core 2.16 with "
        "another tool"
    ),
}
# END GENERATED SUPPORT
ARCH_DIRS = {"x86_64": "x86_64", "aarch64": "sbsa"}
# Ubuntu LTS general-availability kernel series; a newer series on the release is its hardware
# enablement (HWE) kernel: meta packages linux-{image,headers}-<flavour>-hwe-<release> (U4)
UBUNTU_GA_KERNELS = {"20.04": "5.4", "22.04": "5.15", "24.04": "6.8"}


class Platform(object):
    """The facts about one host's OS that decide names and paths."""

    def __init__(self, os_release: dict[str, str], arch: str, kernel: str) -> None:
        self.os_id = (os_release.get("ID") or "").lower()
        like = (os_release.get("ID_LIKE") or "").lower().split()
        self.version = os_release.get("VERSION_ID") or ""
        self.codename = (
            os_release.get("VERSION_CODENAME") or os_release.get("UBUNTU_CODENAME") or ""
        )
        self.name = os_release.get("PRETTY_NAME") or ("%s %s" % (self.os_id, self.version)).strip()
        self.arch = arch
        self.kernel = kernel
        self.major = self.version.split(".")[0]
        if self.os_id in ("ubuntu",):
            self.family = "ubuntu"
        elif self.os_id == "debian":
            self.family = "debian"
        elif self.os_id in ("rhel", "rocky", "almalinux", "centos", "ol") or "rhel" in like:
            self.family = "redhat"
        elif "debian" in like:
            self.family = "debian"
        else:
            self.family = ""

    # --------------------------------------------------------------------------- support
    @property
    def apt(self) -> bool:
        return self.family in ("ubuntu", "debian")

    @property
    def repo_dir(self) -> str:
        """NVIDIA's repository directory: ubuntu2204, debian11 (major only), rhel9 (Rocky/Alma)."""
        if self.family == "ubuntu":
            return "ubuntu" + self.version.replace(".", "")
        if self.family == "debian":
            return "debian" + self.major
        if self.family == "redhat":
            return "rhel" + self.major
        return ""

    @property
    def arch_dir(self) -> str:
        return ARCH_DIRS.get(self.arch, "")

    def support(self) -> tuple[bool, str]:
        """(supported, reason)."""
        key = self.version if self.family == "ubuntu" else self.major
        refused = REFUSED.get((self.family, key))
        if refused:
            return False, refused
        versions = SUPPORTED.get(self.os_id)
        if versions is None:
            return False, "unsupported distribution %s" % (self.name or self.os_id or "unknown")
        if key not in versions:
            return False, "unsupported release %s (supported: %s %s)" % (
                self.name,
                self.os_id,
                ", ".join(versions),
            )
        if not self.arch_dir:
            return False, "unsupported architecture %s (x86_64 or aarch64)" % self.arch
        if self.family == "debian" and self.arch_dir != "x86_64":
            return False, "NVIDIA publishes no Debian repository for %s" % self.arch
        return True, "supported"

    # --------------------------------------------------------------------------- driver
    def driver_install(self, branch: str, flavor: str, version: str = "") -> list[list[str]]:
        """The driver install, as transactions in NVIDIA's documented order. On EL the module
        stream locks the branch, not the version (R1): with an exact version the packages that
        carry it are named with it beside the stream (R3), so that dnf installs exactly that
        version or fails."""
        if self.family == "ubuntu":
            if flavor == "open":
                # NVIDIA's guide: install the open kernel module package first, then the branch meta
                return [["nvidia-kernel-open-%s" % branch], ["cuda-drivers-%s" % branch]]
            return [["cuda-drivers-%s" % branch]]
        if self.family == "debian":
            module = "nvidia-kernel-open-dkms" if flavor == "open" else "nvidia-kernel-dkms"
            return [[module, "nvidia-driver-cuda", "nvidia-persistenced"]]
        if self.family == "redhat":
            stream = "%s-%s" % (branch, "open" if flavor == "open" else "dkms")
            if not version:
                return [["@nvidia-driver:%s" % stream, "nvidia-persistenced"]]
            kmod = "kmod-nvidia-open-dkms" if flavor == "open" else "kmod-nvidia-latest-dkms"
            names = ["nvidia-driver", "nvidia-driver-cuda", kmod, "nvidia-persistenced"]
            return [["@nvidia-driver:%s" % stream] + ["%s-%s" % (n, version) for n in names]]
        return []

    def driver_main_packages(self) -> list[str]:
        """Regexes of the packages whose version is the installed driver's (first match wins)."""
        if self.family == "ubuntu":
            return [
                r"^nvidia-driver-(\d+)(-server)?(-open)?$",
                r"^nvidia-headless-no-dkms-(\d+)(-server)?(-open)?$",
                r"^nvidia-utils-(\d+)(-server)?$",
            ]
        if self.family == "debian":
            return [r"^nvidia-driver-cuda$", r"^nvidia-driver$", r"^libcuda1$", r"^nvidia-smi$"]
        if self.family == "redhat":
            return [r"^nvidia-driver$", r"^nvidia-driver-cuda$", r"^nvidia-driver-libs$"]
        return []

    def driver_family_re(self) -> str:
        """Every package of an installed driver, of any branch (holds, pins, removal)."""
        if self.family == "ubuntu":
            return (
                r"^(cuda-drivers(-\d+)?|cuda-drivers-fabricmanager(-\d+)?|"
                r"nvidia-(driver|headless|headless-no-dkms|utils|compute-utils|dkms|kernel-common|"
                r"kernel-source|kernel-open|fabricmanager|fabricmanager-dev)-\d+(-server)?(-open)?|"
                # Canonical's nvidia-firmware-<B>-<V>; NVIDIA's 580 builds: nvidia-firmware-<B> (U6)
                r"nvidia-firmware-\d+(-server)?(-[0-9.]+)?|"
                r"libnvidia-(compute|common|gl|gpucomp|extra|decode|encode|cfg1|fbc1|nscq)-\d+"
                r"(-server)?|"
                # from 580 the fabric manager, NSCQ and the persistence daemon carry no branch in
                # the name (U3, U6): one name for every branch's release
                r"nvidia-fabricmanager(-dev)?|libnvidia-nscq|nvidia-persistenced|"
                # unversioned names at the driver's version that cuda-drivers-<B> pulls (U2): the
                # pin keeps them, a branch change must move them (down as well as up)
                r"nvidia-modprobe|nvidia-settings|libxnvctrl0|"
                r"xserver-xorg-video-nvidia-\d+(-server)?|"
                r"linux-(modules|objects|signatures)-nvidia-.*)$"
            )
        if self.family == "debian":
            return (
                r"^(cuda-drivers(-\d+)?|cuda-drivers-fabricmanager(-\d+)?|nvidia-driver(-cuda|-libs|-bin)?|"
                r"nvidia-kernel-(open-)?dkms|nvidia-kernel-support|nvidia-alternative|nvidia-smi|"
                r"nvidia-persistenced|nvidia-modprobe|nvidia-cuda-mps|nvidia-vdpau-driver|"
                r"nvidia-settings|nvidia-xconfig|libxnvctrl0|"
                r"nvidia-egl-icd|nvidia-opencl-icd|nvidia-fabricmanager(-dev)?(-\d+)?|"
                r"libnvidia-[a-z0-9-]+|libcuda1|libgl1-nvidia-glvnd-glx|libglx-nvidia0|"
                r"libegl-nvidia0|firmware-nvidia-gsp|xserver-xorg-video-nvidia)$"
            )
        if self.family == "redhat":
            return (
                r"^(nvidia-driver.*|kmod-nvidia.*|nvidia-kmod.*|nvidia-modprobe|nvidia-persistenced|"
                r"nvidia-settings|nvidia-xconfig|nvidia-libXNVCtrl.*|cuda-drivers.*|"
                r"nvidia-fabric-?manager.*|libnvidia-.*)$"
            )
        return "^$"

    def is_driver_package(self, name: str) -> bool:
        return re.match(self.driver_family_re(), name) is not None

    def package_branch(self, name: str, version: str) -> str | None:
        """The driver branch a driver package belongs to: from its name on Ubuntu (-535),
        from its upstream version elsewhere."""
        if self.family == "ubuntu":
            m = re.search(r"-(\d{3})(?:-server)?(?:-open)?(?:-[0-9.]+)?$", name)
            if m:
                return m.group(1)
            m = re.match(r"^linux-(?:modules|objects)-nvidia-(\d{3})", name)
            if m:
                return m.group(1)
        upstream = upstream_version(version)
        m = re.match(r"^(\d{3})\.", upstream)
        return m.group(1) if m else None

    def canonical_flavour(self, name: str) -> bool:
        """Canonical's own builds (Ubuntu archive): -server flavours and signed prebuilt modules."""
        return self.family == "ubuntu" and ("-server" in name or name.startswith("linux-"))

    def fabricmanager_packages(self, branch: str) -> list[str]:
        if self.family == "redhat":
            return ["nvidia-fabricmanager" if int(branch) >= 580 else "nvidia-fabric-manager"]
        if int(branch) >= 580:
            return ["nvidia-fabricmanager", "libnvidia-nscq"]
        return ["nvidia-fabricmanager-%s" % branch, "libnvidia-nscq-%s" % branch]

    def fabricmanager_re(self) -> str:
        if self.family == "redhat":
            return r"^nvidia-fabric-?manager$"
        return (
            r"^(nvidia-fabricmanager(-\d+)?|libnvidia-nscq(-\d+)?|"
            r"cuda-drivers-fabricmanager(-\d+)?)$"
        )

    def persistenced_is_virtual(self) -> bool:
        """On Ubuntu nvidia-persistenced is a name nvidia-compute-utils-<B> provides and conflicts
        with up to 570 (U1), and from 580 a real unversioned package that NVIDIA's
        nvidia-compute-utils-<B> brings along (U6): never named by the roles there (the driver
        transaction brings it, the pin keeps it at the driver's version)."""
        return self.family == "ubuntu"

    def apt_pin(self, branch: str, version: str, only: list[str] | None = None) -> str:
        """apt preferences that make the branch (or the exact version) every driver package's
        candidate, so that a transaction never mixes versions (exact (=) dependencies) and an older
        version of the branch installs (U1, U2). `only`: pin just these packages (the fabric
        manager beside an adopted Canonical driver, at that driver's version)."""
        if not self.apt:
            return ""
        pin = "version %s-*" % version if version else "version %s.*" % branch
        if only:
            return (
                "# Managed by provision (nvidia_driver role): the fabric manager at the adopted "
                "driver's version %s\nPackage: %s\nPin: %s\nPin-Priority: 1001\n"
                % (version, " ".join(only), pin)
            )
        if self.family == "ubuntu":
            # from 580 the fabric manager, NSCQ and the persistence daemon (which
            # nvidia-compute-utils-<B> depends on in NVIDIA's builds) are unversioned names (U3,
            # U6): pinned with the rest, or apt installs the newest branch's (590) beside a 580
            # driver
            unversioned = ""
            if int(branch) >= 580:
                unversioned = "|nvidia-fabricmanager(-dev)?|libnvidia-nscq|nvidia-persistenced"
            names = (
                r"/^(cuda-drivers(-fabricmanager)?-%(b)s|nvidia-.*-%(b)s(-open)?|libnvidia-.*-%(b)s|"
                r"xserver-xorg-video-nvidia-%(b)s|nvidia-firmware-%(b)s-.*|nvidia-modprobe|"
                r"nvidia-settings|libxnvctrl0%(u)s)$/" % {"b": branch, "u": unversioned}
            )
        else:
            names = (
                r"/^(cuda-drivers.*|nvidia-.*|libnvidia-.*|libcuda1|libgl1-nvidia-glvnd-glx|"
                r"libglx-nvidia0|libegl-nvidia0|firmware-nvidia-gsp|xserver-xorg-video-nvidia)$/"
            )
        # By origin too on Ubuntu (U5): Canonical's own builds of the same names (535 in
        # jammy-updates) match the version pin as well, and apt would take the newest of them: the
        # driver from Canonical and the fabric manager from NVIDIA at another version, which refuses
        # to start. apt gives a version the priority of the first specific record that matches it,
        # so Canonical's builds come first, at -1. Not on Debian: NVIDIA's packages there need
        # Debian's own contrib helpers of these names (nvidia-kernel-common 20151021).
        origin = ""
        if self.family == "ubuntu":
            origin = "Package: %s\nPin: release o=Ubuntu\nPin-Priority: -1\n\n" % names
        return (
            "# Managed by provision (nvidia_driver role): the NVIDIA driver %s\n%s"
            "Package: %s\nPin: %s\nPin-Priority: 1001\n"
            % ("version " + version if version else "branch " + branch, origin, names, pin)
        )

    # --------------------------------------------------------------------------- kernel
    def kernel_headers(self) -> list[str]:
        """Headers of the running kernel and the flavour's meta package, so that DKMS builds for the
        kernels updates bring (GoogleCloudPlatform/compute-gpu-installation installs
        linux-headers-gcp for that reason)."""
        if self.family == "redhat":
            return ["kernel-devel-matched", "kernel-devel", "kernel-headers", "dkms"]
        if not self.apt:
            return []
        out = ["linux-headers-%s" % self.kernel]
        flavour = kernel_flavour(self.kernel)
        if flavour:
            out.append("linux-headers-%s" % self.headers_meta(flavour))
        out.append("dkms")
        return out

    def headers_meta(self, flavour: str) -> str:
        """The headers meta package's flavour part: a 22.04 HWE kernel (6.8.0-*-generic, not the
        GA 5.15) follows linux-headers-generic-hwe-22.04; the GA meta package would pull the GA
        kernel's headers, and DKMS would miss the HWE kernels updates bring (U4)."""
        ga = UBUNTU_GA_KERNELS.get(self.version) if self.family == "ubuntu" else None
        series = ".".join(self.kernel.split(".")[:2])
        if ga and flavour in ("generic", "lowlatency") and series != ga:
            return "%s-hwe-%s" % (flavour, self.version)
        return flavour

    def headers_dir(self) -> str:
        if self.family == "redhat":
            return "/usr/src/kernels/%s" % self.kernel
        return "/lib/modules/%s/build" % self.kernel

    def initramfs_command(self) -> list[str]:
        return ["dracut", "--force"] if self.family == "redhat" else ["update-initramfs", "-u"]

    # --------------------------------------------------------------------------- CUDA & libraries
    def toolkit_package(self, cuda: str) -> str:
        return "cuda-toolkit-%s" % cuda.replace(".", "-")

    def toolkit_traps(self, cuda: str) -> list[str]:
        """Never installed: they float to the newest toolkit (`cuda`) or pull the newest driver
        branch (`cuda-12-1` -> cuda-runtime-12-1 -> cuda-drivers (>= 530.30.02))."""
        return ["cuda", "cuda-%s" % cuda.replace(".", "-")]

    def library_packages(self, component: str, stack: dict[str, Any]) -> tuple[list[str], str]:
        """(package names, package version) of cuDNN or NCCL built for the stack's CUDA (L1)."""
        cuda = str(stack["cuda"]["version"])
        cuda_major = cuda.split(".", maxsplit=1)[0]
        rpm = self.family == "redhat"
        if component == "cudnn":
            version = str(stack["cudnn"]["version"])
            build = str(stack["cudnn"].get("build") or "")
            if version.split(".", maxsplit=1)[0] == "8":
                names = ["libcudnn8", "libcudnn8-devel" if rpm else "libcudnn8-dev"]
                sep = "." if rpm else "+"
                return names, "%s-1%s%s" % (version, sep, build)
            dev = "libcudnn9-devel-cuda-%s" if rpm else "libcudnn9-dev-cuda-%s"
            names = [
                "cudnn9-cuda-%s" % cuda_major,
                "libcudnn9-cuda-%s" % cuda_major,
                dev % cuda_major,
            ]
            return names, "%s-1" % version
        version = str(stack["nccl"]["version"])
        build = str(stack["nccl"].get("build") or "")
        names = ["libnccl", "libnccl-devel"] if rpm else ["libnccl2", "libnccl-dev"]
        return names, "%s-1+%s" % (version, build)


def upstream_version(version: str) -> str:
    """`535.129.03-0ubuntu1` -> `535.129.03`; `3:535.154.05-1.el9` -> `535.154.05`."""
    version = version or ""
    if ":" in version:
        version = version.split(":", 1)[1]
    return version.split("-", 1)[0]


def kernel_flavour(kernel: str) -> str:
    """`5.15.0-91-generic` -> generic, `6.8.0-1015-aws` -> aws, `5.10.0-26-cloud-amd64` ->
    cloud-amd64, `6.1.0-13-amd64` -> amd64; "" when the release names none."""
    m = re.match(r"^\d+\.\d+\.\d+-\d+(?:\.\d+)?-([a-z][a-z0-9-]*)$", kernel or "")
    return m.group(1) if m else ""
