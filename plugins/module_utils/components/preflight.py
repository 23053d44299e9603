# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The preflight component: can this host take the stack, checked before anything changes (role
preflight).
"""

from __future__ import absolute_import, annotations, division, print_function

import re

from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
    flag,
    vtuple,
)

NAMES = ("preflight",)
ROLE = "preflight"

CHECKS = (
    CheckSpec(
        "preflight.arch",
        "the CPU architecture is x86_64 or aarch64 (NVIDIA's sbsa repositories)",
        "use an x86_64 or aarch64 (SBSA) server",
    ),
    CheckSpec(
        "preflight.cuda_repo",
        (
            "NVIDIA publishes the stack's CUDA for this OS release and architecture (or "
            "the mirror declares it carries it); the default stack stops on Debian 12, "
            "whose repository starts at CUDA 12.3"
        ),
        (
            "use an OS release NVIDIA publishes the CUDA version for, a stack whose CUDA "
            "exists there, or declare mirrors.nvidia_repo_carries for a mirror that has "
            "it"
        ),
    ),
    CheckSpec(
        "preflight.disk",
        (
            "enough free disk space for the driver, toolkit and PyTorch "
            "(gpu_stack_preflight_min_free_gib at gpu_stack_preflight_disk_path)"
        ),
        "free disk space at the checked path",
    ),
    CheckSpec(
        "preflight.gpu",
        "at least one NVIDIA GPU is on the PCI bus (lspci) or answers nvidia-smi",
        (
            "run the stack only on hosts with NVIDIA GPUs (check --limit and the "
            "inventory)"
        ),
    ),
    CheckSpec(
        "preflight.kernel_headers",
        (
            "the headers of the running kernel are installed or installable (DKMS builds "
            "the module against them)"
        ),
        (
            "install the kernel headers package, or boot a kernel whose headers the "
            "mirror carries"
        ),
    ),
    CheckSpec(
        "preflight.lock",
        (
            "no other provisioning run holds this host (the lock "
            "/var/lib/provision/run.lock names its controller, pid and start time)"
        ),
        (
            "wait for that run; a dead run's lock is taken over after "
            "gpu_stack_lock_stale_s without a sign of life, or at once with -e "
            "gpu_stack_lock_takeover=true"
        ),
    ),
    CheckSpec(
        "preflight.nouveau",
        "the nouveau module is not loaded",
        "run `provision` on the host (it blacklists nouveau), then reboot",
    ),
    # BEGIN GENERATED SUPPORT (make roles, from provisioner/data/support.yml)
    CheckSpec(
        "preflight.os",
        (
            "the host runs a supported OS release (Ubuntu 20.04/22.04/24.04, Debian"
            " 11/12, RHEL/Rocky/Alma 9; EL8 is refused: ansible-core 2.17+ cannot "
            "manage its packages)"
        ),
        "use a supported distribution release",
    ),
    # END GENERATED SUPPORT
    CheckSpec(
        "preflight.package_manager",
        (
            "cloud-init finished and no other process holds the dpkg/rpm locks within "
            "gpu_stack_wait_timeout_s (first boot, unattended-upgrades); names the "
            "holder's pid and name"
        ),
        (
            "wait for the first-boot work to finish (or raise gpu_stack_wait_timeout_s), "
            "then rerun"
        ),
    ),
    CheckSpec(
        "preflight.python",
        (
            "the interpreter for the PyTorch venv (gpu_stack_pytorch_python) is inside "
            "the Python range of the stack's torch wheels"
        ),
        (
            "install a supported Python (e.g. the deadsnakes python3.11 on Ubuntu 20.04) "
            "and set -e gpu_stack_pytorch_python=python3.11"
        ),
    ),
    CheckSpec(
        "preflight.secure_boot",
        (
            "Secure Boot is off, or the driver comes from a signed module path; checked "
            "before anything changes"
        ),
        (
            "enrol a MOK key at the console or use signed modules (Ubuntu "
            "linux-modules-nvidia-<branch>-server), or disable Secure Boot"
        ),
    ),
)


class Preflight(Facts):
    """Judges preflight (methods of the one Judge: evaluate.py)."""

    # ------------------------------------------------------------------ preflight
    def preflight(self) -> None:
        plat = self.plat
        ok, reason = plat.support()
        self.add(
            "preflight.os",
            "pass" if ok else "fail",
            "Ubuntu 20.04/22.04/24.04, Debian 11/12, RHEL/Rocky/Alma 9",
            plat.name,
            "supported OS" if ok else reason + ": nothing will be installed",
            "use a supported distribution release",
        )
        self.add(
            "preflight.arch",
            "pass" if plat.arch_dir else "fail",
            "x86_64 or aarch64 (sbsa)",
            plat.arch,
            ("NVIDIA repository directory %s" % plat.arch_dir)
            if plat.arch_dir
            else "unsupported architecture",
            "use an x86_64 or aarch64 (SBSA) server",
        )
        self._preflight_cuda_published()
        disk = self.section("disk")
        pre = self.stack.get("preflight") or {}
        need = float(pre.get("min_free_gib", 20))
        free = disk.get("free_bytes")
        free_gib = round(free / 1073741824.0, 1) if isinstance(free, int) else None
        self.add(
            "preflight.disk",
            "pass" if free_gib is not None and free_gib >= need else "fail",
            ">= %s GiB free at %s" % (need, disk.get("path") or "/"),
            "%s GiB free" % free_gib,
            "free disk for the stack",
            "free disk space at %s" % (disk.get("path") or "/"),
        )
        self._preflight_headers()
        self._preflight_secure_boot()
        g = self.gpu
        state = g.get("state", "unknown")
        require = flag(pre.get("require_gpu"))
        self.add(
            "preflight.gpu",
            "pass" if state != "no_device" else ("fail" if require else "skip"),
            "at least one NVIDIA GPU",
            "%s x %s (state %s)" % (g.get("gpu_count", 0), g.get("gpu_model") or "none", state),
            ("no NVIDIA GPU found on %s: stopping here, nothing installed" % self.host)
            if state == "no_device"
            else (g.get("message") or "GPUs present"),
            "run the stack only on hosts with NVIDIA GPUs (check --limit / inventory)",
        )
        self._preflight_python()
        nouveau = "nouveau" in (self.section("kernel").get("loaded") or [])
        self.add(
            "preflight.nouveau",
            self.bad if nouveau and self.check_mode else "pass",
            "nouveau not loaded",
            "nouveau loaded" if nouveau else "not loaded",
            "nouveau is loaded: the driver role blacklists it and reboots"
            if nouveau
            else "nouveau not loaded",
            "%s (blacklists nouveau), then reboot" % self.fix,
        )
        self.report.update(
            {
                "os": plat.name,
                "os_id": plat.os_id,
                "os_version": plat.version,
                "arch": plat.arch,
                "kernel": plat.kernel,
                "secure_boot": self.section("secure_boot").get("state"),
                "gpu_count": g.get("gpu_count"),
                "gpu_model": g.get("gpu_model"),
                "gpu_state": state,
                "driver_version": g.get("driver_version"),
                "cuda_driver_version": g.get("cuda_driver_version"),
                "nvswitch_present": g.get("nvswitch_present"),
                "interconnect": (g.get("topology") or {}).get("interconnect"),
                "installed_packages": {
                    n: v["version"]
                    for n, v in sorted(self.installed.items())
                    if self.plat.is_driver_package(n)
                    or n.startswith(("cuda-toolkit", "libcudnn", "cudnn", "libnccl"))
                },
                "plan": self.plan_lines(),
            }
        )

    def _preflight_cuda_published(self) -> None:
        cuda = self.stack.get("cuda") or {}
        version = str(cuda.get("version"))
        where = "%s/%s" % (self.plat.repo_dir, self.plat.arch_dir)
        distros = cuda.get("distros") or {}
        carries = [str(c) for c in (self.stack.get("mirrors") or {}).get("carries") or []]
        state = distros.get(where, "unknown")
        if where in carries:
            status, msg = "pass", "the mirror declares it carries CUDA %s for %s" % (version, where)
        elif state == "published":
            status, msg = "pass", "NVIDIA publishes CUDA %s for %s" % (version, where)
        elif state == "absent":
            status = "fail"
            msg = (
                "NVIDIA publishes no CUDA %s packages for %s: nothing was installed. Use an OS "
                "release NVIDIA publishes it for (%s), a stack whose CUDA version exists for %s, "
                "or, if your mirror carries it, declare mirrors.nvidia_repo_carries: [%s]"
                % (
                    version,
                    where,
                    ", ".join(sorted(k for k, v in distros.items() if v == "published")) or "none",
                    where,
                    where,
                )
            )
        else:
            status = "pass"
            msg = (
                "CUDA %s for %s is unconfirmed: the nvidia_repo role checks that the repository "
                "really carries it" % (version, where)
            )
        self.add(
            "preflight.cuda_repo",
            status,
            "CUDA %s published for %s" % (version, where),
            state if where not in carries else "carried by the mirror",
            msg,
            "choose a supported OS release or CUDA version (provision stack show)",
        )

    def _preflight_headers(self) -> None:
        required = self.headers_required()
        kernel = self.plat.kernel
        package = "linux-headers-%s" % kernel if self.plat.apt else "kernel-devel-%s" % kernel
        if not required:
            self.add(
                "preflight.kernel_headers",
                "skip",
                "%s installed or installable" % package,
                "not required (kernel modules not managed here)",
                "kernel headers for the running kernel %s (needed by DKMS)" % kernel,
            )
            return
        have = bool(self.section("kernel").get("headers_dir"))
        policy = self.section("policy")
        cand = (policy.get(package) or {}).get("candidate") if self.plat.apt else None
        # no apt package index yet (a fresh image): "no candidate" means "not known yet"
        unknown = self.plat.apt and not cand and not policy.get("__indexes__")
        ok = have or bool(cand) or package in self.installed or self.plat.family == "redhat"
        if have:
            actual = "installed"
        elif cand:
            actual = "installable (%s)" % cand
        elif unknown:
            actual = "not known yet: no apt package index (the run refreshes it, then installs)"
        else:
            actual = "not available"
        self.add(
            "preflight.kernel_headers",
            "pass" if ok or unknown else self.bad,
            "%s installed or installable" % package,
            actual,
            "kernel headers for the running kernel %s (needed by DKMS)" % kernel,
            "install %s, or boot a kernel whose headers the mirror carries" % package,
        )

    def _preflight_secure_boot(self) -> None:
        blocked, actual = self.secure_boot_blocked()
        self.add(
            "preflight.secure_boot",
            "fail" if blocked else "pass",
            "Secure Boot disabled, or a signed module path",
            actual,
            self._secure_boot_message() if blocked else actual,
            "enrol a MOK key at the console or use signed modules, or disable Secure Boot",
        )

    def _preflight_python(self) -> None:
        py = self.section("python")
        pt = self.stack.get("pytorch") or {}
        rng = [str(v) for v in (pt.get("python_range") or [])][:2]
        ver = str(py.get("version") or "")
        ok = bool(ver) and (len(rng) != 2 or vtuple(rng[0]) <= vtuple(ver) <= vtuple(rng[1]))
        interp = py.get("interpreter") or pt.get("python") or "python3"
        expected = "%s %s" % (
            interp,
            ("within %s to %s (torch wheels)" % tuple(rng)) if len(rng) == 2 else "present",
        )
        self.add(
            "preflight.python",
            "pass" if ok else "fail",
            expected,
            ver or "not found: %s" % interp,
            "interpreter for the PyTorch venv"
            if ok
            else "the PyTorch venv needs Python %s for this torch; %s on %s is %s: nothing was "
            "installed" % (" to ".join(rng) or "3", interp, self.host, ver or "missing"),
            "install a supported Python (e.g. the deadsnakes python3.11 on Ubuntu 20.04) and "
            "set -e gpu_stack_pytorch_python=python3.11, or choose a torch whose wheels "
            "support this Python",
        )

    def plan_lines(self) -> list[str]:
        """One line per component: what is installed and what the run will do."""
        inst = self.installed
        d = self.drv()
        b = str(d.get("branch"))
        v = str(d.get("version") or "")
        ds = self.driver_state()
        lines = []
        target = "branch %s%s" % (b, (" version " + v) if v else "")
        if not ds["main"]:
            if self.gpu.get("driver_version"):
                lines.append(
                    "driver: %s loaded but no driver package (runfile or vendor image); "
                    "will install %s packages (remove the runfile driver first: "
                    "nvidia-uninstall)" % (self.gpu["driver_version"], target)
                )
            else:
                lines.append("driver: none installed; will install %s" % target)
        elif self.driver_adopted(ds):
            lines.append(
                "driver: adopt %s %s (Canonical's packaged driver satisfies the stack)"
                % (ds["main"], inst[ds["main"]]["version"])
            )
        elif ds["canonical"]:
            lines.append(
                "driver: replace Canonical's %s %s with NVIDIA's %s (its packages are "
                "removed; reboot needed)" % (ds["main"], inst[ds["main"]]["version"], target)
            )
        elif ds["branch"] == b and (not v or ds["userspace"] == v):
            lines.append("driver: adopt %s %s" % (ds["main"], inst[ds["main"]]["version"]))
        else:
            lines.append(
                "driver: change %s %s -> %s (reboot needed)"
                % (ds["main"], inst[ds["main"]]["version"], target)
            )
        cuda = str((self.stack.get("cuda") or {}).get("version"))
        tk = self.plat.toolkit_package(cuda)
        toolkits = sorted(n for n in inst if re.match(r"^cuda-toolkit-\d+-\d+$", n))
        if tk in inst:
            lines.append("cuda: adopt %s %s" % (tk, inst[tk]["version"]))
        else:
            lines.append(
                "cuda: install %s%s" % (tk, (" beside " + ", ".join(toolkits)) if toolkits else "")
            )
        for comp in ("cudnn", "nccl"):
            names, version = self.plat.library_packages(comp, self.stack)
            have = inst.get(names[0])
            if have is None:
                lines.append("%s: install %s %s" % (comp, names[0], version))
            elif have["version"] == version:
                lines.append("%s: adopt %s %s" % (comp, names[0], version))
            else:
                lines.append("%s: change %s %s -> %s" % (comp, names[0], have["version"], version))
        return lines
