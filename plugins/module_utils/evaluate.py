# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Judge the collected facts against the stack: check records, report facts and the change plan.

Pure functions (Python 3.8+, no I/O): `evaluate(components, facts, stack, check_mode)` returns
{"checks": [...], "report": {...}, "plan": {component: {...}}}. A check is
{id, status, expected, actual, message, remediation}; status pass | drift | fail | skip. In check
mode a state that differs from the stack is `drift`; broken state (driver/library mismatch, Secure
Boot blocking unsigned modules, an unsupported OS) is `fail` in both modes. The plan tells the roles
what to change (package transactions, files to write, holds), so that every decision is here, in
Python and unit-tested, and the roles only carry it out with ansible.builtin modules.
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from ansible_collections.provision.gpu.plugins.module_utils.components import ON_REQUEST, REGISTRY
from ansible_collections.provision.gpu.plugins.module_utils.components.base import Context
from ansible_collections.provision.gpu.plugins.module_utils.platforms import (
    upstream_version,
)

# the components judged here, then the ones in the new shape (components/, by registry); the
# ones judged only when asked for by name (`provision check --deep`) are never in the default
COMPONENTS = (
    "preflight", "repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch",
    *[name for name in REGISTRY if name not in ON_REQUEST],
)
# what each component reads
SECTIONS = {
    "preflight": ("disk", "packages", "policy", "kernel", "secure_boot", "gpu", "python"),
    "repo": ("sources", "policy", "packages"),
    "driver": ("packages", "policy", "kernel", "secure_boot", "units", "gpu"),
    "cuda": ("packages", "alternatives"),
    "cudnn": ("packages",),
    "nccl": ("packages",),
    "env": ("env", "alternatives"),
    "pytorch": ("gpu", "torch"),
}
SECTIONS.update({name: module.SECTIONS for name, module in REGISTRY.items()})
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/provision.conf"
PIN_FILE = "/etc/apt/preferences.d/provision-nvidia-driver"
BLACKLIST_FILE = "/etc/modprobe.d/blacklist-nouveau.conf"
BLACKLIST = (
    "# Managed by provision (nvidia_driver role)\nblacklist nouveau\noptions nouveau modeset=0\n"
)
CONTAINERS = ("systemd-nspawn", "docker", "lxc", "podman", "container", "containerd", "oci", "wsl")


def sections_for(components: list[str]) -> list[str]:
    out: list[str] = []
    for c in components:
        for s in SECTIONS.get(c, ()):
            if s not in out:
                out.append(s)
    return out


def flag(value: Any, default: bool = True) -> bool:  # noqa: ANN401 - YAML/Jinja values
    """A boolean from the stack: real bools, and the strings Jinja may leave ("False", "no")."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() not in ("false", "no", "0", "off", "none")


def vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or ""))


class Judge(Context):
    """One evaluation: facts + stack + mode -> checks, report, plan (components not yet moved to
    components/ are judged here)."""

    @property
    def installed(self) -> dict[str, dict[str, Any]]:
        pk = self.section("packages").get("installed") or {}
        return {n: v for n, v in pk.items() if v.get("installed")}

    @property
    def held(self) -> set[str]:
        return set(self.section("packages").get("held") or [])

    @property
    def gpu(self) -> dict[str, Any]:
        return self.section("gpu")

    @property
    def in_container(self) -> bool:
        return (self.section("os").get("container") or "") in CONTAINERS

    def kernel_modules_managed(self) -> bool:
        value = self.stack.get("kernel_modules", "auto")
        if str(value).lower() == "auto":
            return not self.in_container
        return flag(value)

    def dpkg_interrupted(self) -> bool:
        """An earlier install was cut short: the roles run `dpkg --configure -a` first."""
        return bool(self.section("packages").get("interrupted"))

    def dpkg_reinstall(self) -> list[str]:
        """Packages an unpack cut short left half-installed or reinst-required: `dpkg --configure`
        and `apt-get --fix-broken install` refuse them; the roles reinstall them at the version dpkg
        was unpacking (`name=version`, or the bare name when dpkg recorded no version)."""
        found = self.section("packages").get("reinstall") or {}
        return ["%s=%s" % (n, v) if v else str(n) for n, v in sorted(found.items())]

    def headers_required(self) -> bool:
        """Kernel headers (running kernel + the flavour's meta) and DKMS: with kernel modules
        managed, or when gpu_stack_kernel_headers says so."""
        value = (self.stack.get("preflight") or {}).get("kernel_headers", "auto")
        if str(value).lower() == "auto":
            return self.kernel_modules_managed()
        return flag(value)

    def drv(self) -> dict[str, Any]:
        return self.stack.get("driver") or {}

    # ------------------------------------------------------------------ the installed driver
    def driver_state(self) -> dict[str, Any]:
        """The installed driver: main package, version and branch, source, other branches."""
        d = self.drv()
        branch = str(d.get("branch") or "")
        inst = self.installed
        main = None
        for regex in self.plat.driver_main_packages():
            names = sorted(n for n in inst if re.match(regex, n))
            # prefer the stack's branch when several are installed
            names.sort(key=lambda n: self.plat.package_branch(n, inst[n]["version"]) != branch)
            if names:
                main = names[0]
                break
        family = sorted(n for n in inst if self.plat.is_driver_package(n))
        fm_re = self.plat.fabricmanager_re()
        user = upstream_version(inst[main]["version"]) if main else ""
        main_branch = self.plat.package_branch(main, inst[main]["version"]) if main else None
        other = []
        for n in family:
            if re.match(fm_re, n):
                continue
            b = self.plat.package_branch(n, inst[n]["version"])
            if b is not None and b != branch and b.isdigit() and len(b) == 3:
                other.append(n)
        canonical = sorted(n for n in family if self.plat.canonical_flavour(n))
        signed = sorted(n for n in canonical if n.startswith("linux-modules-nvidia-"))
        return {
            "main": main,
            "userspace": user,
            "branch": main_branch,
            "family": family,
            "other_branch": other,
            "canonical": canonical,
            "signed_modules": signed,
        }

    def driver_adopted(self, ds: dict[str, Any]) -> bool:
        """A packaged driver not from NVIDIA's repository (Canonical's -server flavours, signed
        linux-modules-nvidia-*) is adopted when it is the stack's branch, version and flavour."""
        if not ds["canonical"] or not ds["main"]:
            return False
        d = self.drv()
        if ds["branch"] != str(d.get("branch")):
            return False
        if d.get("version") and ds["userspace"] != d.get("version"):
            return False
        is_open = str(ds["main"]).endswith("-open")
        return is_open == (d.get("flavor") == "open")

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

    def secure_boot_blocked(self) -> tuple[bool, str]:
        state = self.section("secure_boot").get("state")
        d = self.drv()
        if state != "enabled":
            return False, "Secure Boot %s" % (state or "unknown")
        if flag(d.get("secure_boot_signed"), False):
            return False, "Secure Boot enabled (signed module path declared)"
        ds = self.driver_state()
        if ds["signed_modules"] and self.driver_adopted(ds):
            return False, "Secure Boot enabled, Canonical's signed modules: %s" % " ".join(
                ds["signed_modules"]
            )
        return True, "Secure Boot enabled, unsigned DKMS modules"

    def _secure_boot_message(self) -> str:
        b = self.drv().get("branch")
        return (
            "Secure Boot is on and the NVIDIA modules would be unsigned, so they would not load: "
            "nothing was changed. Options: on Ubuntu use Canonical's signed "
            "linux-modules-nvidia-%s-server packages (their driver is adopted when it matches "
            "the stack); otherwise enrol the DKMS signing key as a MOK (mokutil --import, then "
            "confirm in MokManager at the console on the next boot), then set "
            "gpu_stack_secure_boot_signed=true" % b
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

    # ------------------------------------------------------------------ repository
    def _repo_key_check(self, src: dict[str, Any], old_key_kept_for: list[str]) -> None:
        """The keyring apt verifies NVIDIA's repository with holds the expected key: cuda-keyring
        comes over HTTPS from the mirror, and whoever controls the mirror controls the keyring."""
        wanted = [
            str(f).replace(" ", "").upper()
            for f in (self.stack.get("repo") or {}).get("key_fingerprints") or []
        ]
        if src.get("old_key") and src.get("apt_key") and not old_key_kept_for:
            self.add(
                "repo.key",
                self.bad,
                "NVIDIA's rotated key 7fa2af80 not trusted by apt",
                "7fa2af80 in /etc/apt/trusted.gpg(.d)",
                "apt still trusts the repository key NVIDIA rotated out in 2022",
                "%s (or `apt-key del 7fa2af80`)" % self.fix,
            )
            return
        if not wanted:
            self.add("repo.key", "skip", None, None, "no key fingerprints configured", "")
            return
        malformed = [f for f in wanted if not re.match(r"^[0-9A-F]{40}\Z", f)]
        if malformed:
            self.add(
                "repo.key", "fail", "one of " + " ".join(wanted), None,
                "gpu_stack_repo_key_fingerprints: %r is not an OpenPGP fingerprint (40 hex "
                "digits); nothing is installed from the repository" % malformed[0],
                "give the full fingerprint as gpg --show-keys prints it",
            )
            return
        have = [str(f) for f in src.get("keyring_fingerprints") or []]
        path = "/usr/share/keyrings/cuda-archive-keyring.gpg"
        if not src.get("keyring"):
            status = "drift" if self.check_mode else "fail"
            actual = "no keyring"
            msg = "%s is not installed yet (cuda-keyring)" % path
        elif set(wanted) & set(have):
            status, actual, msg = "pass", " ".join(sorted(set(wanted) & set(have))), "key verified"
        else:
            status = "fail"
            actual = " ".join(have) or "no OpenPGP key"
            msg = (
                "%s holds %s, not the expected repository key: the cuda-keyring package from "
                "the mirror is not NVIDIA's (or the mirror is re-signed with a key not listed in "
                "gpu_stack_repo_key_fingerprints); nothing is installed from it"
                % (path, actual)
            )
        self.add(
            "repo.key",
            status,
            "one of " + " ".join(wanted),
            actual,
            msg,
            "" if status == "pass" else (
                "compare the keyring with NVIDIA's key (gpg --show-keys %s); if the mirror is "
                "yours and re-signed, add its key's fingerprint to gpu_stack_repo_key_fingerprints"
                % path
            ),
        )

    def _package_state_check(self) -> None:
        """dpkg finished its last run: an install cut short (a lost connection, Ctrl-C, a reboot)
        leaves its journal or half-configured packages; apt refuses to work until dpkg ends it."""
        pk = self.section("packages")
        if not self.plat.apt:
            self.add("repo.package_state", "skip", None, None, "dpkg only (apt family)", "")
            return
        broken = [str(n) for n in pk.get("broken") or []]
        if not self.dpkg_interrupted():
            self.add("repo.package_state", "pass", "dpkg's last run finished", "finished",
                     "no interrupted dpkg run, no half-configured package")
            return
        self.add(
            "repo.package_state",
            self.bad,
            "dpkg's last run finished",
            "interrupted" + (": " + " ".join(broken) if broken else " (dpkg journal not empty)"),
            "an earlier install was cut short: apt refuses to work until dpkg finishes it",
            self.fix,
        )

    def repo(self) -> None:
        plat = self.plat
        base = str((self.stack.get("mirrors") or {}).get("nvidia_repo") or "").rstrip("/")
        url = "%s/%s/%s" % (base, plat.repo_dir, plat.arch_dir)
        cuda = str((self.stack.get("cuda") or {}).get("version"))
        tk = plat.toolkit_package(cuda)
        src = self.section("sources")
        files = src.get("files") or {}
        plan: dict[str, Any] = {
            "url": url + "/",
            "remove": [],
            "rewrite": [],
            "dpkg_repair": self.dpkg_interrupted(),
            "dpkg_reinstall": self.dpkg_reinstall(),
        }
        self._package_state_check()
        if plat.apt:
            old_key_users = [
                "%s:%d" % (path, n)
                for path, text in sorted(files.items())
                for n, ln in enumerate(text.splitlines(), 1)
                if ln.strip().startswith("deb")
                and "download.nvidia.com/" in ln
                and url not in ln
                and "signed-by" not in ln.lower()
            ]
            list_file = "/etc/apt/sources.list.d/cuda-%s-%s.list" % (plat.repo_dir, plat.arch_dir)
            keyring = "/usr/share/keyrings/cuda-archive-keyring.gpg"
            plan.update(
                {
                    "list_file": list_file,
                    "list_content": "deb [signed-by=%s] %s/ /\n" % (keyring, url),
                    "keyring_deb": "%s/cuda-keyring_%s_all.deb"
                    % (url, (self.stack.get("repo") or {}).get("keyring_version") or "1.1-1"),
                    "keyring_installed": "cuda-keyring" in self.installed,
                    # NVIDIA rotated its apt key 7fa2af80 out in 2022 (apt-key del 7fa2af80);
                    # kept while another NVIDIA entry without signed-by (the machine-learning
                    # repository) still verifies against apt's trusted keys
                    "remove_old_key": bool(src.get("apt_key") and src.get("old_key"))
                    and not old_key_users,
                    "old_key_kept_for": old_key_users,
                }
            )
            entries = 0
            for path, text in sorted(files.items()):
                hits = [
                    ln for ln in text.splitlines() if url in ln and not ln.strip().startswith("#")
                ]
                entries += len(hits)
                if not hits or path == list_file:
                    continue
                keep = [
                    ln for ln in text.splitlines() if url not in ln or ln.strip().startswith("#")
                ]
                if path.endswith(".sources") or not any(
                    ln.strip() and not ln.strip().startswith("#") for ln in keep
                ):
                    plan["remove"].append(path)
                else:
                    plan["rewrite"].append({"path": path, "content": "\n".join(keep) + "\n"})
            if plat.family == "debian":
                plan["rewrite"].extend(self._debian_contrib(files))
            pol = self.section("policy").get(tk) or {}
            cand = pol.get("candidate")
            from_repo = any(url in s for ver in pol.get("versions") or [] for s in ver["sources"])
            ok = entries == 1 and bool(cand) and from_repo
            if ok:
                msg = "repository configured"
            elif entries != 1:
                msg = "sources entries for the NVIDIA repository: %d (need exactly one)" % entries
            else:
                msg = (
                    "CUDA %s is not in %s (NVIDIA does not publish %s for %s): pick a CUDA "
                    "version this repository carries" % (cuda, url, tk, plat.repo_dir)
                )
            status = "pass" if ok else (self.bad if entries != 1 else "fail")
            self.add(
                "repo.source",
                status,
                "one entry for %s/ carrying %s" % (url, tk),
                "%d entries; %s candidate %s" % (entries, tk, cand or "(none)"),
                msg,
                self.fix
                if entries != 1
                else "use a CUDA version %s publishes for %s, or a mirror that carries it"
                % (url, plat.repo_dir),
            )
            if plat.family == "debian":
                self._debian_contrib_check(files)
                self._debian_driver_build(url, entries == 1)
            self._repo_key_check(src, plan.get("old_key_kept_for") or [])
        elif plat.family == "redhat":
            repo_id = "cuda-%s-%s" % (plat.repo_dir, plat.arch_dir)
            plan.update(
                {
                    "repo_id": repo_id,
                    "repo_file": "/etc/yum.repos.d/%s.repo" % repo_id,
                    "gpgkey": url + "/D42D0685.pub",
                }
            )
            hits = sorted(path for path, text in files.items() if url in text)
            plan["remove"] = [h for h in hits if h != plan["repo_file"]]
            dnf = self.facts.get("dnf_available") or {}
            carries = dnf.get("rc") == 0 and tk in (dnf.get("stdout") or "")
            ok = len(hits) == 1 and carries
            self.add(
                "repo.source",
                "pass" if ok else (self.bad if len(hits) != 1 else "fail"),
                "repo %s (%s) carrying %s" % (repo_id, url, tk),
                "%d repo files; %s %s" % (len(hits), tk, "available" if carries else "not found"),
                "repository configured"
                if ok
                else "repository missing or CUDA %s not found there" % cuda,
                self.fix,
            )
        self.plan["repo"] = plan
        self.report["nvidia_repo_url"] = url + "/"

    def _debian_archive_lines(self, files: dict[str, str]) -> list[tuple[str, int, str]]:
        """One-line apt entries of Debian's own archive for this release (deb822 is handled as a
        whole stanza)."""
        code = self.plat.codename
        out = []
        for path, text in sorted(files.items()):
            for n, line in enumerate(text.splitlines()):
                s = line.strip()
                if s.startswith("#") or not s.startswith("deb "):
                    continue
                parts = re.sub(r"\[[^\]]*\]", "", s).split()
                if len(parts) >= 4 and code and parts[2] == code:
                    out.append((path, n, line))
        return out

    def _debian_contrib(self, files: dict[str, str]) -> list[dict[str, str]]:
        """NVIDIA's Debian packages need `contrib` (nvidia-kernel-support, glx-alternative-nvidia,
        nvidia-installer-cleanup): add it to Debian's own entries that lack it."""
        code = self.plat.codename
        rewrites = []
        for path, text in sorted(files.items()):
            lines = text.splitlines()
            changed = False
            if path.endswith(".sources"):
                stanza_suite = False
                for i, line in enumerate(lines):
                    if line.lower().startswith("suites:"):
                        stanza_suite = code in line.split()
                    if (
                        line.lower().startswith("components:")
                        and stanza_suite
                        and "contrib" not in line.split()
                    ):
                        lines[i] = line.rstrip() + " contrib"
                        changed = True
                    if not line.strip():
                        stanza_suite = False
            else:
                for _path, n, line in self._debian_archive_lines({path: text}):
                    if "contrib" not in line.split():
                        lines[n] = line.rstrip() + " contrib"
                        changed = True
            if changed:
                rewrites.append({"path": path, "content": "\n".join(lines) + "\n"})
        return rewrites

    def _debian_driver_build(self, url: str, configured: bool) -> None:
        """Debian: the path needs NVIDIA's nvidia-driver-cuda at the stack's branch (or exact
        version); no public listing confirms a 535 build for debian11, so the repository is asked
        (apt-cache policy) and the run stops with the reason when it carries none."""
        d = self.drv()
        b, v = str(d.get("branch")), str(d.get("version") or "")
        pol = self.section("policy").get("nvidia-driver-cuda") or {}
        builds = sorted(
            {
                upstream_version(ver["version"])
                for ver in pol.get("versions") or []
                if any(url in src for src in ver.get("sources") or [])
            }
        )
        fits = [x for x in builds if (x == v if v else x.split(".")[0] == b)]
        want = "nvidia-driver-cuda %s in %s/" % (v or ("%s.*" % b), url)
        if not configured or not pol:
            status, msg = "skip", "asked once the repository is configured (apt-get update)"
        elif fits:
            status, msg = "pass", "the repository carries %s" % " ".join(fits)
        else:
            status = "fail"
            msg = (
                "NVIDIA's repository carries no %s build of nvidia-driver-cuda (it has: %s): "
                "nothing of the driver was installed; choose a branch or version it carries"
                % (v or "branch " + b, " ".join(builds) or "none")
            )
        self.add(
            "repo.driver_build",
            status,
            want,
            " ".join(builds) or "none",
            msg,
            "set driver.branch/driver.version to a build the repository carries "
            "(apt-cache policy nvidia-driver-cuda)",
        )

    def _debian_contrib_check(self, files: dict[str, str]) -> None:
        one_line = self._debian_archive_lines(files)
        deb822 = [
            t for path, t in files.items() if path.endswith(".sources") and self.plat.codename in t
        ]
        if not one_line and not deb822:
            self.add(
                "repo.contrib",
                "skip",
                "contrib enabled in Debian's archive",
                "no entry for Debian's %s archive" % self.plat.codename,
                "no Debian archive configured (a local mirror provides the packages)",
            )
            return
        missing = bool(self._debian_contrib(files))
        self.add(
            "repo.contrib",
            self.bad if missing else "pass",
            "Debian's archive entries include contrib",
            "contrib missing" if missing else "contrib enabled",
            "NVIDIA's Debian driver packages depend on contrib packages "
            "(nvidia-kernel-support, glx-alternative-nvidia)",
            self.fix,
        )

    # ------------------------------------------------------------------ driver
    def driver(self) -> None:
        plat = self.plat
        d = self.drv()
        b = str(d.get("branch"))
        v = str(d.get("version") or "")
        flavor = str(d.get("flavor") or "proprietary")
        g = self.gpu
        ds = self.driver_state()
        adopted = self.driver_adopted(ds)
        user = ds["userspace"]
        expected_version = v or "%s.*" % b
        blocked, sb_actual = self.secure_boot_blocked()
        self.add(
            "driver.secure_boot",
            "fail" if blocked else "pass",
            "Secure Boot disabled, or a signed module path",
            sb_actual,
            self._secure_boot_message() if blocked else "module signing not an issue",
            "enrol a MOK key at the console or use signed modules, then set "
            "gpu_stack_secure_boot_signed=true",
        )
        self._driver_flavor(flavor, ds, adopted)
        branch_ok = ds["branch"] == b and not ds["other_branch"]
        self.add(
            "driver.branch",
            "pass" if branch_ok else self.bad,
            "branch %s only" % b,
            ("installed %s" % user if user else "no driver package")
            + ((", other branches: " + " ".join(ds["other_branch"])) if ds["other_branch"] else ""),
            "driver branch",
            self.fix,
        )
        smi_v = g.get("driver_version") or ""
        state = g.get("state", "unknown")
        user_ok = ds["branch"] == b and (not v or user == v)
        smi_ok = state != "ok" or (smi_v.startswith(b + ".") and (not v or smi_v == v))
        self.add(
            "driver.version",
            "pass" if user_ok and smi_ok else self.bad,
            expected_version,
            "userspace %s, nvidia-smi %s" % (user or "none", smi_v or state),
            "driver version (packages and nvidia-smi)",
            self.fix,
        )
        if state == "ok" and smi_v == user and user:
            mstatus = "pass"
        elif not user and state in ("not_installed", "no_device"):
            mstatus = "skip"
        else:
            mstatus = "fail"
        self.add(
            "driver.module_loaded",
            mstatus,
            "loaded module %s" % (user or expected_version),
            smi_v if state == "ok" else (g.get("message") or state),
            "loaded kernel module does not match the userspace driver (driver/library mismatch)"
            if state == "version_mismatch"
            else "loaded module vs userspace",
            "reboot" if state in ("version_mismatch", "driver_not_loaded") else self.fix,
        )
        fm_names = plat.fabricmanager_packages(b)
        want_fm = self._want_fabricmanager()
        branch_pkgs = self.hold_set(ds, want_fm, fm_names)
        hold_on = flag(d.get("hold"))
        unheld = [n for n in branch_pkgs if n not in self.held]
        self.add(
            "driver.hold",
            "skip" if not hold_on else ("pass" if branch_pkgs and not unheld else self.bad),
            "held: %s" % (" ".join(branch_pkgs) or "driver packages"),
            ("not held: " + " ".join(unheld))
            if unheld
            else ("held" if branch_pkgs else "no driver packages"),
            "driver packages held against unattended upgrades",
            self.fix,
        )
        if not plat.apt:
            pin = ""
        elif not adopted:
            pin = plat.apt_pin(b, v)
        else:
            # an adopted Canonical driver is not pinned, but NVIDIA's fabric manager beside it
            # must be at its version (nv-fabricmanager refuses another driver version), not the
            # newest of the branch
            pin = plat.apt_pin(b, user, only=fm_names) if want_fm and user else ""
        self._pin_check(pin)
        self._persistence_check()
        self._fabricmanager_check(want_fm, fm_names, user, expected_version)
        bl = self.section("kernel").get("blacklist") or ""
        self.add(
            "driver.nouveau_blacklist",
            "pass" if "blacklist nouveau" in bl else self.bad,
            "%s blacklists nouveau" % BLACKLIST_FILE,
            "present" if "blacklist nouveau" in bl else "missing",
            "nouveau blacklisted",
            self.fix,
        )
        nouveau = "nouveau" in (self.section("kernel").get("loaded") or [])
        reboot = (
            state == "version_mismatch"
            or (nouveau and state != "ok")
            or (state == "driver_not_loaded" and bool(user))
        )
        self.add(
            "driver.reboot",
            self.bad if reboot else "pass",
            "no reboot pending",
            ("reboot required: %s" % (g.get("message") or state)) if reboot else "none pending",
            "reboot required" if reboot else "no reboot pending",
            "reboot",
        )
        self._next_boot_check()
        self._dcgm_check(state)
        self.report.update(
            {
                "driver_version": smi_v or user or None,
                "driver_userspace_version": user or None,
                "driver_branch": b,
                "driver_flavor": flavor,
                "driver_state": state,
                "driver_package": ds["main"],
                "driver_adopted": adopted,
                "cuda_driver_version": g.get("cuda_driver_version"),
                "gpu_count": g.get("gpu_count"),
                "gpu_model": g.get("gpu_model"),
                "fabricmanager": want_fm,
                "held_packages": sorted(n for n in self.held if plat.is_driver_package(n)),
            }
        )
        self.plan["driver"] = self._driver_plan(ds, adopted, pin, want_fm, fm_names, reboot)

    def hold_set(self, ds: dict[str, Any], want_fm: bool, fm_names: list[str]) -> list[str]:
        """The installed driver packages that must be held: the stack's branch (not another's),
        the fabric manager only where it belongs, and on apt only packages at a driver version
        (Debian's contrib helpers such as nvidia-kernel-common 20151021 are not the driver's)."""
        plat = self.plat
        d = self.drv()
        v = str(d.get("version") or "")
        inst = self.installed
        return sorted(
            n
            for n in ds["family"]
            if n not in ds["other_branch"]
            and (not re.match(plat.fabricmanager_re(), n) or (want_fm and n in fm_names))
            and (not plat.apt or self._versioned(n) or n.startswith("cuda-drivers"))
            and (not v or not self._versioned(n) or upstream_version(inst[n]["version"]) == v)
        )

    def _versioned(self, name: str) -> bool:
        """Packages whose version is the driver's (not Debian contrib helpers like
        nvidia-kernel-common 20151021 or nvidia-installer-cleanup)."""
        inst = self.installed.get(name)
        if not inst:
            return False
        return re.match(r"^\d{3}\.", upstream_version(inst["version"])) is not None

    def _want_fabricmanager(self) -> bool:
        policy = str(self.drv().get("fabricmanager") or "auto")
        if policy == "always":
            return True
        if policy == "never":
            return False
        return bool(self.gpu.get("nvswitch_present"))

    def _pin_check(self, pin: str) -> None:
        if not pin:
            return
        current = self.section("kernel").get("pin_file")
        ok = current == pin
        self.add(
            "driver.pin",
            "pass" if ok else self.bad,
            "%s pins the driver packages (%s)" % (PIN_FILE, pin.splitlines()[2]),
            "as managed" if ok else ("missing" if current is None else "edited"),
            "apt preferences keep every driver package at one version",
            self.fix,
        )

    def persistence_settings(self) -> dict[str, Any]:
        """How persistence mode is made to hold on this OS. Ubuntu's packaged unit is static
        (started by udev when the driver binds), has StopWhenUnneeded=true and runs
        --no-persistence-mode (canonical/nvidia-graphics-drivers:debian/templates/
        nvidia-compute-utils-flavour.nvidia-persistenced.service.in): a drop-in turns persistence
        mode on, as NVIDIA/ansible-role-nvidia-driver's override does. EL's and Debian's units have
        [Install] and no such flag: enabled and started, no drop-in (unless the packaged command
        does carry --no-persistence-mode)."""
        u = self.section("units").get("nvidia-persistenced") or {}
        packaged = list(u.get("packaged_exec_start") or [])
        if self.plat.persistenced_is_virtual():
            command = [
                "/usr/bin/nvidia-persistenced",
                "--user",
                "nvidia-persistenced",
                "--persistence-mode",
                "--verbose",
            ]
        elif "--no-persistence-mode" in packaged:
            command = [
                ("--persistence-mode" if a == "--no-persistence-mode" else a) for a in packaged
            ]
        else:
            command = []
        content = ""
        if command:
            content = (
                "# Managed by provision (nvidia_driver role): persistence mode on. The packaged\n"
                "# unit runs --no-persistence-mode; StopWhenUnneeded=false keeps the daemon when\n"
                "# it was started by hand rather than by udev.\n"
                "[Unit]\nStopWhenUnneeded=false\n\n[Service]\nExecStart=\nExecStart=%s\n"
                % " ".join(command)
            )
        return {
            "dropin": PERSISTENCED_DROPIN if command else "",
            "dropin_content": content,
            "install": [] if self.plat.persistenced_is_virtual() else ["nvidia-persistenced"],
            # a static unit cannot be enabled: udev starts it
            "enable": not self.plat.persistenced_is_virtual()
            and (u.get("enabled") or "") not in ("static", "masked"),
        }

    def _persistence_check(self) -> None:
        d = self.drv()
        if not flag(d.get("persistence")):
            self.add(
                "driver.persistence",
                "skip",
                "persistence not managed (disabled)",
                None,
                "persistence mode",
                "",
            )
            return
        u = self.section("units").get("nvidia-persistenced") or {}
        gpus = self.gpu.get("gpus") or []
        modes = sorted({str(x.get("persistence_mode")) for x in gpus}) or ["no GPUs listed"]
        s = self.persistence_settings()
        dropin_ok = (
            not s["dropin"]
            or self.section("units").get("persistenced_dropin") == s["dropin_content"]
        )
        unit_ok = u.get("active") == "active" and (u.get("enabled") in ("enabled", "static"))
        gpu_ok = bool(gpus) and all(x.get("persistence_mode") == "Enabled" for x in gpus)
        ok = unit_ok and gpu_ok and dropin_ok
        self.add(
            "driver.persistence",
            "pass" if ok else self.bad,
            "nvidia-persistenced active with --persistence-mode; persistence mode Enabled on "
            "every GPU",
            "unit %s/%s%s; GPUs: %s"
            % (
                u.get("enabled") or "?",
                u.get("active") or "?",
                "" if dropin_ok else "; drop-in missing or edited",
                ",".join(modes),
            ),
            "persistence mode",
            self.fix,
        )

    def _fabricmanager_check(
        self, want: bool, names: list[str], user: str, expected_version: str
    ) -> None:
        inst = self.installed
        fm_inst = sorted(n for n in inst if re.match(self.plat.fabricmanager_re(), n))
        fm = self.section("units").get("nvidia-fabricmanager") or {}
        main = names[0]
        fm_ver = upstream_version(inst[main]["version"]) if main in inst else ""
        if want:
            ok = (
                bool(user)
                and fm_ver == user
                and fm.get("active") == "active"
                and all(n in inst for n in names)
            )
            status = "pass" if ok else ("fail" if fm_ver and user and fm_ver != user else self.bad)
            self.add(
                "driver.fabricmanager",
                status,
                "%s %s active" % (" ".join(names), user or expected_version),
                "%s %s %s" % (" ".join(fm_inst) or "not installed", fm_ver, fm.get("active", "?")),
                "fabric manager must equal the driver version on NVSwitch systems",
                self.fix,
            )
        elif (
            not self.gpu.get("lspci_available")
            and str(self.drv().get("fabricmanager") or "auto") == "auto"
        ):
            # minimal images lack lspci: an HGX A100 (no Fabric section in nvidia-smi -q) is then
            # not seen as an NVSwitch system; the role installs pciutils and probes again
            self.add(
                "driver.fabricmanager",
                self.bad,
                "NVSwitch presence known (lspci)",
                "lspci missing (pciutils not installed)",
                "cannot tell whether NVSwitch is present without lspci",
                self.fix,
            )
        else:
            self.add(
                "driver.fabricmanager",
                "pass" if not fm_inst else self.bad,
                "no fabric manager (no NVSwitch)",
                " ".join(fm_inst) or "not installed",
                "fabric manager only where NVSwitch is present",
                self.fix,
            )

    def _dcgm_check(self, state: str) -> None:
        """With dcgm.install in the stack: NVIDIA DCGM's package for the stack's CUDA major is
        installed, and its host engine (nvidia-dcgm) runs where the package ships the unit and the
        driver's module is loaded (the deep health tier's `dcgmi diag` needs both)."""
        if not flag((self.stack.get("dcgm") or {}).get("install"), False):
            self.add("driver.dcgm", "skip", None, None, "DCGM is not part of the stack", "")
            return
        major = str((self.stack.get("cuda") or {}).get("version") or "").split(".")[0]
        name = "datacenter-gpu-manager-4-cuda%s" % major
        unit = self.section("units").get("nvidia-dcgm") or {}
        installed = name in self.installed
        shipped = unit.get("load", "not-found") != "not-found"
        running = unit.get("active") == "active" and unit.get("enabled") == "enabled"
        ok = installed and (running or not shipped or state != "ok")
        self.add(
            "driver.dcgm",
            "pass" if ok else self.bad,
            "%s installed, nvidia-dcgm enabled and active" % name,
            "%s; nvidia-dcgm %s/%s" % (
                "installed" if installed else "not installed",
                unit.get("enabled") or "-", unit.get("active") or "-",
            ),
            "NVIDIA DCGM (dcgm.install in the stack) for the deep health tier",
            self.fix,
        )

    def _next_boot_check(self) -> None:
        k = self.section("kernel")
        kernels = k.get("kernels") or []
        ko = k.get("nvidia_ko") or {}
        must = [x for x in (self.plat.kernel, k.get("default_kernel") or "") if x]
        must = sorted(set(must))
        missing = [x for x in kernels if not ko.get(x) and x in must]
        others = [x for x in kernels if not ko.get(x) and x not in must]
        if not kernels:
            status, actual = "skip", "no kernels under /lib/modules (container)"
        else:
            status = "pass" if not missing else self.bad
            actual = (
                ("missing for: " + " ".join(missing))
                if missing
                else ("present for " + " ".join(must))
            )
            if others:
                actual += "; older kernels without one (not judged): " + " ".join(others)
        self.add(
            "driver.next_boot",
            status,
            "an NVIDIA module for the running and the default boot kernel: " + " ".join(must),
            actual,
            "the next boot finds a module",
            "install the headers for the new kernel (the role installs the flavour's "
            "linux-headers meta package) and run dkms autoinstall, or " + self.fix,
        )

    def _driver_plan(
        self,
        ds: dict[str, Any],
        adopted: bool,
        pin: str,
        want_fm: bool,
        fm_names: list[str],
        reboot: bool,
    ) -> dict[str, Any]:
        plat = self.plat
        d = self.drv()
        b = str(d.get("branch"))
        v = str(d.get("version") or "")
        inst = self.installed
        change = bool(ds["other_branch"]) or (
            bool(v) and bool(ds["userspace"]) and ds["userspace"] != v
        )
        replace = bool(ds["canonical"]) and not adopted
        remove = list(ds["other_branch"])
        if replace:
            remove += [n for n in ds["canonical"] if n not in remove]
        fm_installed = sorted(n for n in inst if re.match(plat.fabricmanager_re(), n))
        if plat.family == "redhat":
            # one fabric manager name for every branch on EL (nvidia-fabric-manager): dnf keeps
            # another branch's installed one (`present`), and it would not start against the new
            # module; it goes with the other branch's packages and is installed again
            remove += [
                n
                for n in fm_installed
                if plat.package_branch(n, inst[n]["version"]) not in (None, b) and n not in remove
            ]
        fm_remove = [] if want_fm else fm_installed
        fm_remove += [
            n
            for n in fm_installed
            if want_fm
            and n not in fm_names
            and n not in fm_remove
            and not n.startswith("cuda-drivers-fabricmanager")
        ]
        unhold = sorted(
            n
            for n in self.held
            if n in inst
            and plat.is_driver_package(n)
            and (change or replace or n in remove or n in fm_remove)
        )
        kernel_pkgs = plat.kernel_headers() if self.headers_required() else []
        # one transaction where NVIDIA's order allows: headers and DKMS with the first, the fabric
        # manager (at the driver's version through the same pin) with the last
        transactions = [
            list(t)
            for t in ([] if adopted else plat.driver_install(b, str(d.get("flavor")), v))
        ]
        extra_last = list(fm_names) if want_fm else []
        if want_fm and v and plat.family == "redhat":
            # the fabric manager at exactly the driver version (R3); its rpm has no epoch
            extra_last = ["%s-%s" % (n, v) for n in fm_names]
        if not transactions and (kernel_pkgs or extra_last):
            transactions = [[]]
        if transactions:
            transactions[0] = kernel_pkgs + transactions[0]
            transactions[-1] = transactions[-1] + extra_last
        persist = (
            self.persistence_settings()
            if flag(d.get("persistence"))
            else {"dropin": "", "dropin_content": "", "install": [], "enable": False}
        )
        if plat.persistenced_is_virtual() or plat.family == "debian":
            persist[
                "install"
            ] = []  # Ubuntu: provided by nvidia-compute-utils; Debian: in the transaction
        hold = []
        if flag(d.get("hold")):
            hold = [
                n
                for n in self.hold_set(ds, want_fm, fm_names)
                if n not in self.held and n not in remove
            ]
        # installed driver packages of the branch at another version than the pinned one (an
        # upgrade past the pin, or an older pin): `state: latest` moves them to the pin's
        # candidate; `present` would leave them (apt keeps what satisfies the dependencies)
        resync = []
        if plat.apt and adopted and want_fm:
            # the fabric manager at another version than the adopted driver's
            resync = sorted(
                n
                for n in fm_names
                if n in inst and upstream_version(inst[n]["version"]) != ds["userspace"]
            )
        elif plat.apt and v and not adopted:
            resync = sorted(
                n
                for n in ds["family"]
                if n not in remove
                and n not in fm_remove
                and self._versioned(n)
                and upstream_version(inst[n]["version"]) != v
                and (not re.match(plat.fabricmanager_re(), n) or (want_fm and n in fm_names))
            )
        return {
            "dpkg_repair": self.dpkg_interrupted(),
            "dpkg_reinstall": self.dpkg_reinstall(),
            "adopted": adopted,
            "resync": resync,
            "change": change or replace,
            "remove": sorted(set(remove)),
            "unhold": unhold,
            "pin_file": PIN_FILE if pin else "",
            "pin_content": pin,
            "transactions": transactions,
            "fabricmanager_install": fm_names if want_fm else [],
            "fabricmanager_remove": sorted(set(fm_remove)),
            "persistenced": persist,
            "hold": hold,
            "kernel_packages": kernel_pkgs,
            "kernel_modules": self.kernel_modules_managed(),
            "blacklist_file": BLACKLIST_FILE,
            "blacklist_content": BLACKLIST,
            "initramfs": plat.initramfs_command(),
            "reboot_needed": reboot,
            "module_loaded": self.gpu.get("state") == "ok",
            "nouveau_loaded": "nouveau" in (self.section("kernel").get("loaded") or []),
            "lspci_available": bool(self.gpu.get("lspci_available")),
            "main_package": ds["main"],
        }

    def _driver_flavor(self, flavor: str, ds: dict[str, Any], adopted: bool) -> None:
        """driver.flavor: the open flavour's refusals (pre-Turing GPUs; NVIDIA's documented
        Ubuntu steps), then the flavour really installed (the kernel module packages) and loaded
        (/proc/driver/nvidia/version says "Open Kernel Module" for the open one)."""
        g = self.gpu
        b = str(self.drv().get("branch"))
        turing = g.get("turing_or_newer")
        inst = self.installed
        kinds = {n: kernel_module_flavour(n) for n in inst}
        has_open = sorted(n for n, k in kinds.items() if k == "open")
        has_prop = sorted(n for n, k in kinds.items() if k == "proprietary")
        loaded = loaded_module_flavour(self.section("kernel").get("nvidia_version") or "")
        other = "proprietary" if flavor == "open" else "open"
        wrong = has_prop if flavor == "open" else has_open
        right = has_open if flavor == "open" else has_prop
        actual = "installed: %s; loaded: %s" % (
            "open (%s)" % " ".join(has_open) if has_open and not has_prop
            else "proprietary (%s)" % " ".join(has_prop) if has_prop and not has_open
            else "both flavours (%s)" % " ".join(has_open + has_prop) if has_open
            else "no kernel module package",
            loaded or "unknown",
        )
        status, msg, fix = "pass", "%s kernel modules" % flavor, self.fix
        if flavor == "open" and turing is False:
            status, actual = "fail", "GPUs older than Turing; " + actual
            msg, fix = "the open flavour needs compute capability >= 7.5", (
                "use driver.flavor proprietary")
        elif flavor == "open" and self.plat.family == "ubuntu" and not adopted:
            status = "fail"
            msg = (
                "open kernel modules through NVIDIA's documented Ubuntu steps are refused: "
                "cuda-drivers-%(b)s pulls nvidia-driver-%(b)s, whose nvidia-dkms-%(b)s is the "
                "proprietary module, and its nvidia-kernel-source-%(b)s ships files that "
                "nvidia-kernel-open-%(b)s also ships (AWS's procedure adds dpkg "
                "--force-overwrite), so apt ends with both flavours and DKMS builds the "
                "proprietary one" % {"b": b}
            )
            fix = (
                "use driver.flavor proprietary, or preinstall Canonical's "
                "nvidia-driver-%s-open (adopted when it satisfies the stack)" % b
            )
        elif wrong:
            status = self.bad
            msg = "the %s flavour's module package is installed: %s (apt chose it)" % (
                other, " ".join(wrong))
            fix = "remove %s, then %s" % (" ".join(wrong), self.fix)
        elif right and loaded == other and ds.get("userspace") == g.get("driver_version"):
            status = self.bad
            msg = "the loaded module is the %s one although the %s flavour is installed" % (
                other, flavor)
            fix = "reboot, or rebuild the module (dkms autoinstall), then %s" % self.fix
        self.add(
            "driver.flavor",
            status,
            "%s kernel modules installed and loaded%s" % (
                flavor, "; every GPU Turing or newer" if flavor == "open" else ""),
            actual,
            msg,
            fix,
        )

    # ------------------------------------------------------------------ CUDA toolkit
    def cuda(self) -> None:
        plat = self.plat
        c = self.stack.get("cuda") or {}
        version = str(c.get("version"))
        tk = plat.toolkit_package(version)
        inst = self.installed
        traps = [t for t in plat.toolkit_traps(version) if t in inst]
        toolkits = sorted(n for n in inst if re.match(r"^cuda-toolkit-\d+-\d+$", n))
        ok = tk in inst and not traps
        self.add(
            "cuda.toolkit",
            "pass" if ok else self.bad,
            "%s installed; never %s" % (tk, " or ".join(plat.toolkit_traps(version))),
            ("%s %s" % (tk, inst[tk]["version"]) if tk in inst else "%s not installed" % tk)
            + (("; trap packages installed: " + " ".join(traps)) if traps else "")
            + "; toolkits: "
            + " ".join(toolkits),
            "CUDA toolkit %s" % version,
            self.fix,
        )
        alt = self.section("alternatives")
        prefix = "/usr/local/cuda-%s" % version
        set_default = flag(c.get("set_default"))
        link = alt.get("usr_local_cuda")
        self.add(
            "cuda.symlink",
            "skip" if not set_default else ("pass" if link == prefix else self.bad),
            "/usr/local/cuda -> %s" % prefix,
            "/usr/local/cuda -> %s" % (link or "missing"),
            "default toolkit",
            self.fix,
        )
        release = alt.get("nvcc_release")
        self.add(
            "cuda.nvcc",
            "pass" if release == version else self.bad,
            "nvcc release %s" % version,
            ("nvcc release %s, V%s" % (release, alt.get("nvcc_version")))
            if release
            else "nvcc not runnable at %s/bin/nvcc" % prefix,
            "nvcc --version",
            self.fix,
        )
        major = version.split(".", maxsplit=1)[0]
        alternatives = []
        if set_default:
            for name, linkpath in (
                ("cuda", "/usr/local/cuda"),
                ("cuda-%s" % major, "/usr/local/cuda-%s" % major),
            ):
                info = alt.get(name) or {}
                # /usr/local/cuda replaced by hand (`ln -sfn /usr/local/cuda-11.3 /usr/local/cuda`)
                # leaves the alternatives database at the stack's toolkit: --set then rewrites the
                # link (update-alternatives repairs a master link that no longer points into
                # /etc/alternatives), so a link that resolves elsewhere is set again
                relink = name == "cuda" and link != prefix
                alternatives.append(
                    {
                        "name": name,
                        "link": linkpath,
                        "path": prefix,
                        "register": prefix not in (info.get("choices") or {}),
                        "set": info.get("current") != prefix or relink,
                    }
                )
        spec = tk
        self.plan["cuda"] = {
            "install": spec,
            "prefix": prefix,
            "alternatives": alternatives,
            "remove_traps": traps,
        }
        self.report.update(
            {
                "cuda_version": release,
                "nvcc_version": alt.get("nvcc_version"),
                "cuda_toolkits": toolkits,
            }
        )

    # ------------------------------------------------------------------ cuDNN and NCCL
    def library(self, component: str) -> None:
        names, version = self.plat.library_packages(component, self.stack)
        inst = self.installed
        cfg = self.stack.get(component) or {}
        label = "cuDNN" if component == "cudnn" else "NCCL"
        wrong = [n for n in names if n not in inst or inst[n]["version"] != version]
        actual = ", ".join(
            "%s %s" % (n, inst[n]["version"] if n in inst else "not installed") for n in names
        )
        self.add(
            "%s.version" % component,
            "pass" if not wrong else self.bad,
            "%s = %s" % (", ".join(names), version),
            actual,
            "%s %s for CUDA %s"
            % (label, cfg.get("version"), (self.stack.get("cuda") or {}).get("version"))
            if not wrong
            else "wrong %s build: %s" % (label, " ".join(wrong)),
            self.fix,
        )
        hold_on = flag(cfg.get("hold"))
        unheld = [n for n in names if n not in self.held]
        self.add(
            "%s.hold" % component,
            "skip" if not hold_on else ("pass" if not unheld else self.bad),
            "held: %s" % " ".join(names),
            ("not held: " + " ".join(unheld)) if unheld else "held",
            "%s packages held against unattended upgrades" % label,
            self.fix,
        )
        sep = "-" if self.plat.family == "redhat" else "="
        unhold = sorted(n for n in names if n in self.held and n in wrong)
        self.plan[component] = {
            "packages": names,
            "version": version,
            "install": ["%s%s%s" % (n, sep, version) for n in names],
            "unhold": unhold,
            # what is not held now, and what the run unholds for the version change
            "hold": sorted(n for n in names if n not in self.held or n in unhold)
            if hold_on
            else [],
            "needs_install": bool(wrong),
        }
        main = inst.get(names[0])
        self.report.update(
            {
                "system_%s_version" % component: upstream_version(main["version"])
                if main
                else None,
                "system_%s_package_version" % component: main["version"] if main else None,
            }
        )

    # ------------------------------------------------------------------ environment
    def env(self) -> None:
        e = self.section("env")
        cfg = self.stack.get("env") or {}
        cuda = str((self.stack.get("cuda") or {}).get("version"))
        prefix = "/usr/local/cuda-%s" % cuda
        managed = e.get("managed_profile") or cfg.get("profile_file") or "/etc/profile.d/cuda.sh"
        ldconf = "/etc/ld.so.conf.d/cuda-%s.conf" % cuda.replace(".", "-")
        profile = profile_script(cuda)
        ld_content = "# Managed by provision (cuda_env role): CUDA %s\n%s/lib64\n" % (cuda, prefix)
        files = e.get("files") or {}
        shell = e.get("shell") or {}
        foreign = []  # (path, line number, line, versions)
        for path, text in sorted(files.items()):
            if path == managed:
                continue
            for n, line, versions in p.cuda_paths_in(text):
                others = [x for x in versions if x and x != cuda]
                if others:
                    foreign.append((path, n, line.strip(), others))
        switch = flag(cfg.get("neutralize_foreign"))
        ours = [
            f
            for f in foreign
            if switch and (f[0].startswith("/etc/profile.d/") or f[0] == "/etc/environment")
        ]
        blocked = [f for f in foreign if f not in ours]
        where = "; ".join(
            "%s:%d sets %s" % (f[0], f[1], ", ".join("/usr/local/cuda-" + x for x in f[3]))
            for f in foreign
        )
        remedies = []
        if ours:
            remedies.append(
                "%s (it comments out the lines in /etc/profile.d and /etc/environment)" % self.fix
            )
        if blocked:
            remedies.append(
                "edit " + ", ".join(sorted({"%s line %d" % (f[0], f[1]) for f in blocked}))
            )
        self.add(
            "env.foreign_paths",
            "pass" if not foreign else self.bad,
            "no file exports another CUDA toolkit's bin or lib64",
            where or "none",
            ("another CUDA's paths in the login environment: %s" % where)
            if foreign
            else "only CUDA %s paths" % cuda,
            "; ".join(remedies) or self.fix,
        )
        self._env_user_files(e, cuda)
        nvcc = shell.get("nvcc") or ""
        release = shell.get("nvcc_release")
        dangling = shell.get("missing") or []
        profile_ok = files.get(managed) == profile
        path_ok = nvcc == prefix + "/bin/nvcc" and release == cuda and profile_ok and not dangling
        foreign_fix = ("remove the foreign CUDA paths: " + where) if foreign else self.fix
        self.add(
            "env.path",
            "pass" if path_ok else self.bad,
            "login shell: nvcc %s/bin/nvcc, release %s; %s as managed" % (prefix, cuda, managed),
            "nvcc %s%s; profile %s; cuda paths not installed: %s"
            % (
                nvcc or "not found",
                (", release " + release) if release else "",
                "as managed" if profile_ok else ("missing" if managed not in files else "edited"),
                " ".join(dangling) or "none",
            ),
            "PATH of a login shell",
            foreign_fix if foreign and not path_ok else self.fix,
        )
        ld = [x for x in (shell.get("ld_library_path") or "").split(":") if x]
        ours_ld = prefix + "/lib64"
        ahead = []
        if ours_ld in ld:
            for x in ld[: ld.index(ours_ld)]:
                m = re.match(r"^/usr/local/cuda(?:-([0-9.]+))?/", x + "/")
                if m and (m.group(1) or "") != cuda:
                    ahead.append(x)
        ldconf_ok = (e.get("ldconf") or {}).get(ldconf) == ld_content
        ld_ok = ours_ld in ld and not ahead and ldconf_ok
        self.add(
            "env.ld_library_path",
            "pass" if ld_ok else self.bad,
            "LD_LIBRARY_PATH has %s with no other CUDA's lib64 ahead of it; %s as managed"
            % (ours_ld, ldconf),
            "LD_LIBRARY_PATH=%s; ld.so.conf.d entry %s%s"
            % (
                ":".join(ld),
                "as managed" if ldconf_ok else "missing or edited",
                ("; ahead of it: " + " ".join(ahead)) if ahead else "",
            ),
            "library path",
            foreign_fix if foreign else self.fix,
        )
        libs = cfg.get("verify_libraries") or ["libcudart.so.12", "libcudnn", "libnccl"]
        have = e.get("ldconfig") or []
        missing = [lib for lib in libs if not any(h.startswith(lib) for h in have)]
        # what the dynamic linker really resolves: a library of the same SONAME in another
        # toolkit's directory listed first wins, whatever else the cache lists
        resolved = e.get("ldconfig_resolved") or {}
        wrong = sorted(
            "%s => %s" % (name, path)
            for name, path in resolved.items()
            if _foreign_cuda_dir(path, cuda)
        )
        major = cuda.split(".", maxsplit=1)[0]
        foreign_ld = [  # (file, line number, line, version)
            (path, n, line.strip(), version)
            for path, text in sorted((e.get("ldconf") or {}).items())
            if path != ldconf
            for n, line, version in p.cuda_dirs_in_ld_conf(text)
            if version not in (cuda, major)
        ]
        ld_where = "; ".join("%s:%d lists %s" % (f[0], f[1], f[2]) for f in foreign_ld)
        problems = (
            (["missing: " + ", ".join(missing)] if missing else [])
            + (["resolved from another CUDA: " + ", ".join(wrong)] if wrong else [])
            + (["another CUDA's directory in the linker path: " + ld_where] if foreign_ld else [])
        )
        self.add(
            "env.ldconfig",
            "pass" if not problems else self.bad,
            "ldconfig -p lists %s, each resolved outside other CUDA toolkits' directories; no "
            "other CUDA's directory in /etc/ld.so.conf.d" % ", ".join(libs),
            "; ".join(problems) if problems else "all listed",
            "dynamic linker cache",
            (
                "%s (it comments out the other CUDA's directories in /etc/ld.so.conf.d and runs "
                "ldconfig)" % self.fix
            )
            if foreign_ld and switch
            else (("edit " + ", ".join("%s line %d" % (f[0], f[1]) for f in foreign_ld))
                  if foreign_ld else self.fix),
        )
        neutralize_ld = []
        for path in sorted({f[0] for f in foreign_ld}) if switch else []:
            numbers = {f[1] for f in foreign_ld if f[0] == path}
            lines = (e.get("ldconf") or {})[path].splitlines()
            neutralize_ld.append(
                {
                    "path": path,
                    "content": "\n".join(
                        ("# provision: other CUDA directory disabled (stack CUDA %s): %s"
                         % (cuda, ln)) if i + 1 in numbers else ln
                        for i, ln in enumerate(lines)
                    )
                    + "\n",
                }
            )
        neutralize = []
        for path in sorted({f[0] for f in ours}):
            lines = files[path].splitlines()
            numbers = {f[1] for f in ours if f[0] == path}
            new = [
                ("# provision: foreign CUDA path disabled (stack CUDA %s): %s" % (cuda, ln))
                if i + 1 in numbers
                else ln
                for i, ln in enumerate(lines)
            ]
            neutralize.append({"path": path, "content": "\n".join(new) + "\n"})
        self.plan["env"] = {
            "prefix": prefix,
            "toolkit_installed": bool((self.section("alternatives") or {}).get("prefix_exists")),
            "profile_file": managed,
            "profile_content": profile,
            "ldconf_file": ldconf,
            "ldconf_content": ld_content,
            "neutralize": neutralize,
            "neutralize_ldconf": neutralize_ld,
            "blocked": ["%s:%d: %s" % (f[0], f[1], f[2]) for f in blocked],
        }

    def _env_user_files(self, e: dict[str, Any], cuda: str) -> None:
        """Another CUDA's paths in the named users' shell files (the multi-GPU guides'
        `export PATH=/usr/local/cuda-11.3/bin...` in ~/.bashrc): drift named by file and line
        with the exact edit, in a run as in a check; the role never edits a user's dotfile."""
        owners = e.get("user_file_owners") or {}
        found = []  # (path, line number, line, versions)
        for path, text in sorted((e.get("user_files") or {}).items()):
            for n, line, versions in p.cuda_paths_in(text):
                others = [x for x in versions if x and x != cuda]
                if others:
                    found.append((path, n, line.strip(), others))
        where = "; ".join(
            "%s:%d (user %s) sets %s"
            % (f[0], f[1], owners.get(f[0], "?"), ", ".join("/usr/local/cuda-" + x for x in f[3]))
            for f in found
        )
        self.add(
            "env.user_shell_files",
            "pass" if not found else "drift",
            "no named user's shell file exports another CUDA toolkit's bin or lib64",
            where or "none",
            ("another CUDA's paths in users' shell files (not edited by provision): %s" % where)
            if found
            else "only CUDA %s paths" % cuda,
            "; ".join(
                "edit %s line %d: delete `%s` (%s sets CUDA %s for login shells)"
                % (f[0], f[1], f[2], e.get("managed_profile") or "/etc/profile.d/cuda.sh", cuda)
                for f in found
            ),
        )

    # ------------------------------------------------------------------ PyTorch
    def pytorch(self) -> None:
        pt = self.stack.get("pytorch") or {}
        cuda = str((self.stack.get("cuda") or {}).get("version"))
        t = self.section("torch")
        f = t.get("probe") or {}
        build = str(pt.get("build"))
        version = str(pt.get("version"))
        label = "" if build == "cpu" else "+" + build
        accepted = [version + "+cpu", version] if build == "cpu" else [version + label]
        tv, ta = pt.get("torchvision") or "", pt.get("torchaudio") or ""
        extras_ok = (not tv or f.get("torchvision") == tv + label) and (
            not ta or f.get("torchaudio") == ta + label
        )
        version_ok = f.get("torch_version") in accepted and extras_ok
        g = self.gpu
        need_cuda = (
            build != "cpu"
            and flag(pt.get("require_cuda"))
            and int(g.get("gpu_count") or 0) > 0
            and g.get("state") == "ok"
        )
        torch_cuda = f.get("torch_cuda")
        cuda_ok = "torch_version" in f and (
            (build == "cpu" and torch_cuda is None)
            or (
                build != "cpu" and torch_cuda == cuda and (f.get("cuda_available") or not need_cuda)
            )
        )
        venv = t.get("venv") or pt.get("venv") or "/opt/pytorch"
        expected = "torch %s%s%s%s in %s" % (
            version,
            label,
            (", torchvision " + tv) if tv else "",
            (", torchaudio " + ta) if ta else "",
            venv,
        )
        actual = (
            ("torch %s" % f["torch_version"])
            if "torch_version" in f
            else (f.get("error") or "no venv at %s" % venv)
        )
        for extra in ("torchvision", "torchaudio"):
            if f.get(extra):
                actual += ", %s %s" % (extra, f[extra])
        self.add(
            "pytorch.version",
            "pass" if version_ok else self.bad,
            expected,
            actual,
            "PyTorch in the venv",
            self.fix,
        )
        self.add(
            "pytorch.cuda",
            "pass" if cuda_ok else self.bad,
            "torch.version.cuda None (CPU build)"
            if build == "cpu"
            else "torch.version.cuda %s%s" % (cuda, ", cuda available" if need_cuda else ""),
            "torch.version.cuda %s, cuda available %s, bundled NCCL %s, bundled cuDNN %s"
            % (
                torch_cuda,
                f.get("cuda_available", False),
                f.get("nccl_version"),
                f.get("cudnn_version"),
            ),
            "CPU build: no CUDA in torch (reported as such)"
            if build == "cpu"
            else "CUDA build of torch",
            self.fix,
        )
        reqs = ["torch==%s%s" % (version, label)]
        if tv:
            reqs.append("torchvision==%s%s" % (tv, label))
        if ta:
            reqs.append("torchaudio==%s%s" % (ta, label))
        index = pt.get("index_url") or ""
        links = pt.get("find_links") or ""
        hashes = [str(h).strip() for h in pt.get("hashes") or [] if str(h).strip()]
        pip_args = (["--index-url", index] if index else ["--no-index"]) + (
            ["--find-links", links] if links else []
        )
        requirements = venv + "/provision-requirements.txt"
        # with hashes, pip installs exactly the pinned wheels and refuses one whose sha256 differs
        # (--require-hashes: every requirement, dependencies too, pinned and hashed)
        install_args = pip_args + (
            ["--require-hashes", "-r", requirements] if hashes else list(reqs)
        )
        if hashes:
            hashes_status, hashes_actual = "pass", "%d pinned wheels with sha256" % len(hashes)
            hashes_msg = "pip installs with --require-hashes"
        elif index and not links:
            hashes_status, hashes_actual = "pass", "index %s" % index
            hashes_msg = "pip checks the sha256 the index's links carry"
        else:
            # with an index too, pip takes the mirror's wheel when the index is unreachable or
            # the mirror's wheel carries a build tag: that wheel would be unverified
            hashes_status, hashes_actual = "fail", "find-links %s, no hashes" % (links or "-")
            hashes_msg = (
                "a find-links mirror serves no hashes pip can check: the wheels would be "
                "installed unverified, so nothing is installed"
            )
        self.add(
            "pytorch.hashes",
            hashes_status,
            "wheels verified by sha256 (the index's, or mirrors.pytorch_hashes)",
            hashes_actual,
            hashes_msg,
            ""
            if hashes_status == "pass"
            else "list the wheels' pins and sha256 in mirrors.pytorch_hashes "
            "(pip-compile --generate-hashes), or use an index",
        )
        matches = (
            f.get("torch_version") in accepted
            and extras_ok
            and ((build == "cpu" and torch_cuda is None) or (build != "cpu" and torch_cuda == cuda))
        )
        self.plan["pytorch"] = {
            "venv": venv,
            "python": pt.get("python") or "python3",
            "venv_python": venv + "/bin/python",
            "create_venv": not t.get("pip_exists"),
            "install": [] if matches or hashes_status != "pass" else reqs,
            "pip_args": pip_args,
            "install_args": install_args,
            "requirements_file": requirements if hashes else "",
            "requirements_content": "".join(h + "\n" for h in hashes),
        }
        self.report.update(
            {
                "pytorch_venv": venv,
                "torch_version": f.get("torch_version"),
                "torch_cuda": torch_cuda,
                "torch_cuda_available": f.get("cuda_available"),
                # what training really uses: torch's own (bundled) NCCL and cuDNN, not the system
                # libnccl2/libcudnn8 packages (those are system_nccl_version / system_cudnn_version)
                "torch_bundled_nccl_version": f.get("nccl_version"),
                "torch_bundled_cudnn_version": cudnn_text(f.get("cudnn_version")),
                "torchvision_version": f.get("torchvision"),
                "torchaudio_version": f.get("torchaudio"),
            }
        )


def cudnn_text(value: Any) -> str | None:  # noqa: ANN401 - torch returns int or None
    """torch.backends.cudnn.version() 90100 -> "9.1.0", 8902 -> "8.9.2"."""
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return str(value)
    if n >= 10000:
        return "%d.%d.%d" % (n // 10000, (n % 10000) // 100, n % 100)
    return "%d.%d.%d" % (n // 1000, (n % 1000) // 100, n % 100)


def _foreign_cuda_dir(path: str, cuda: str) -> bool:
    """A path inside another CUDA toolkit's directory (/usr/local/cuda-11.3/...): not the stack's
    version, nor its major-version alias (/usr/local/cuda-12) or /usr/local/cuda."""
    m = re.match(r"^/usr/local/cuda-(\d+(?:\.\d+)?)/", path)
    return m is not None and m.group(1) not in (cuda, cuda.split(".", maxsplit=1)[0])


OPEN_MODULE_RE = re.compile(
    r"^(nvidia-dkms-\d+(-server)?-open|nvidia-kernel-open-\d+|"
    r"nvidia-kernel-source-\d+(-server)?-open|linux-modules-nvidia-\d+(-server)?-open-\d.*|"
    r"nvidia-kernel-open-dkms|kmod-nvidia-open-dkms)$"
)
PROPRIETARY_MODULE_RE = re.compile(
    r"^(nvidia-dkms-\d+(-server)?|nvidia-kernel-source-\d+(-server)?|"
    r"linux-modules-nvidia-\d+(-server)?-\d.*|nvidia-kernel-dkms|kmod-nvidia-latest-dkms)$"
)


def kernel_module_flavour(name: str) -> str:
    """Which kernel module flavour a package builds or ships: open, proprietary or "" (U1: the
    -open packages of Canonical's control; D1, R1/R3: Debian's and EL's module package names)."""
    if OPEN_MODULE_RE.match(name):
        return "open"
    if PROPRIETARY_MODULE_RE.match(name):
        return "proprietary"
    return ""


def loaded_module_flavour(version_file: str) -> str:
    """/proc/driver/nvidia/version -> open ("NVIDIA UNIX Open Kernel Module for x86_64"),
    proprietary ("NVIDIA UNIX x86_64 Kernel Module"), or "" when no module is loaded."""
    if "Open Kernel Module" in version_file:
        return "open"
    if "Kernel Module" in version_file:
        return "proprietary"
    return ""


def profile_script(cuda: str) -> str:
    prefix = "/usr/local/cuda-%s" % cuda
    return (
        "# Managed by provision (cuda_env role): CUDA %(cuda)s. Local edits are drift.\n"
        "# Each directory is added only if it exists, and only once.\n"
        "if [ -d %(p)s/bin ]; then\n"
        '  case ":${PATH}:" in\n'
        '    *":%(p)s/bin:"*) ;;\n'
        '    *) PATH="%(p)s/bin${PATH:+:${PATH}}" ;;\n'
        "  esac\n"
        "  export PATH\n"
        "fi\n"
        "if [ -d %(p)s/lib64 ]; then\n"
        '  case ":${LD_LIBRARY_PATH}:" in\n'
        '    *":%(p)s/lib64:"*) ;;\n'
        '    *) LD_LIBRARY_PATH="%(p)s/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" ;;\n'
        "  esac\n"
        "  export LD_LIBRARY_PATH\n"
        "fi\n" % {"cuda": cuda, "p": prefix}
    )


def evaluate(
    components: list[str], facts: dict[str, Any], stack: dict[str, Any], check_mode: bool
) -> dict[str, Any]:
    judge = Judge(facts, stack, check_mode)
    for component in components:
        if component in REGISTRY:
            REGISTRY[component].judge(judge)
        elif component in ("cudnn", "nccl"):
            judge.library(component)
        else:
            getattr(judge, component)()
    return {"checks": judge.checks, "report": judge.report, "plan": judge.plan}
