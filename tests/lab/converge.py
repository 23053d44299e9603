"""The converge scenario, as explicit steps over one simulated 8x H100 host of a personality:

fresh read-only check -> converge with an older driver version of the personality's branch pinned
-> second run changes nothing -> read-only check clean -> drifts found by a read-only check ->
site.yml repairs them -> branch change to another modelled branch (holds move, one reboot) -> back
to the pin with `provision --no-reboot` (no reboot, the rest converges, stops before validation,
exit 1) -> the next run reboots once.

The branch is the personality's (`driver.branch`): 580 on ubuntu2204 and el9, where NVIDIA's
unversioned names (nvidia-fabricmanager, libnvidia-nscq, nvidia-persistenced) exist at a newer
branch's version too (590.48.01 in the ubuntu2204 model) and must stay at the driver's.

`Scenario` holds the fleet and what the steps learn (no module-level state); each test module calls
the steps in order for its personality (test_converge_ubuntu2204.py, test_converge_debian11.py,
test_converge_el9.py: dnf, rpm and versionlock where the others have apt, dpkg and apt-mark).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from test_roles_helpers import (
    PlayResult,
    fingerprint,
    fingerprint_diff,
    fleet_args,
    provision_cli,
    run_playbook,
    stack_vars,
)

REBOOT_HANDLER = "RUNNING HANDLER [provision.gpu.nvidia_driver : Reboot to load the NVIDIA driver]"
# a read-only check runs at most this many tasks per host (issue 12 acceptance)
MAX_CHECK_TASKS = 15
# the widely copied multi-GPU guide's lines, exporting another toolkit ahead of everything
GUIDE = (
    "export PATH=/usr/local/cuda-11.3/bin${PATH:+:${PATH}}\n"
    "export LD_LIBRARY_PATH=/usr/local/cuda-11.3/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}\n"
)


@dataclass(frozen=True)
class Personality:
    name: str
    old: str  # the pinned, older driver version of the branch
    new: str  # a newer one of the branch in the same repository
    other_version: str  # the newest of other_branch
    torch: bool  # a torch venv exists (no cp39 CPU wheel for Debian 11 here)
    drift_script: str  # shell run as root on the host, after a clean check
    expected_drift: dict[str, tuple[str, str]]  # check id -> (status, text in actual)
    held_after_converge: tuple[str, ...]
    never_installed: tuple[str, ...]  # package names the roles must never install here
    driver_package: str  # whose version is the driver's
    package_manager: str = "apt"  # apt (dpkg, apt-mark holds) or dnf (rpm, dnf versionlock)
    branch: str = "535"  # the stack's driver.branch for the scenario
    other_branch: str = "550"  # the branch change's target


@dataclass
class Scenario:
    personality: Personality
    fleet: Any
    work: Path
    log: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return str(self.fleet.hosts[0].name)

    @property
    def skip_tags(self) -> str | None:
        return None if self.personality.torch else "pytorch,validation"

    def ev(self, **over: Any) -> dict[str, Any]:
        return stack_vars(self.fleet.stack_path,
                          **{"gpu_stack_driver_branch": self.personality.branch,
                             "gpu_stack_driver_version": self.personality.old, **over})

    def sh(self, script: str, timeout: float = 600) -> str:
        res = self.fleet.run(self.host, script, timeout=timeout)
        assert res.rc == 0, (script[:200], res.stdout[-3000:], res.stderr[-3000:])
        return str(res.stdout)

    def site(self, name: str, **over: Any) -> PlayResult:
        self.log.append(name)
        return run_playbook(self.fleet, "site.yml", self.ev(**over), tmp=self.work / name,
                            skip_tags=self.skip_tags)

    def check(self, name: str) -> tuple[PlayResult, list[str]]:
        """check.yml in check mode, with a fingerprint of the host before and after."""
        self.log.append(name)
        before = fingerprint(self.fleet, self.host)
        res = run_playbook(self.fleet, "check.yml", self.ev(), check=True, tmp=self.work / name)
        after = fingerprint(self.fleet, self.host)
        return res, fingerprint_diff(before, after)

    def statuses(self, res: PlayResult) -> dict[str, str]:
        return {k: v["status"] for k, v in res.checks(self.host).items()}

    def smi_driver(self) -> str:
        return self.sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0").strip()

    def versions(self) -> dict[str, str]:
        """Installed packages -> version-release (no epoch): dpkg's installed or held ones, or
        the rpm database."""
        if self.personality.package_manager == "dnf":
            out = self.sh("rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n'")
            return dict(ln.split(" ", 1) for ln in out.splitlines() if " " in ln)
        out = self.sh("dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'")
        return {ln.split()[0]: ln.split()[1] for ln in out.splitlines()
                if len(ln.split()) > 2 and ln.split()[2] in ("ii", "hi")}

    def held(self) -> list[str]:
        """Held package names: apt-mark holds, or the names of dnf's versionlock entries."""
        if self.personality.package_manager == "dnf":
            text = self.sh("cat /etc/dnf/plugins/versionlock.list 2>/dev/null || true")
            return [re.sub(r"-(\d+:)?[^-]+-[^-]+$", "", ln.strip()) for ln in text.splitlines()
                    if ln.strip() and not ln.startswith(("#", "!"))]
        return self.sh("apt-mark showhold").split()

    def fabricmanager(self, branch: str) -> str:
        """The fabric manager's package name: unversioned from 580 (NVIDIA/gpu-driver-container
        #451), nvidia-fabricmanager-<B> (apt) / nvidia-fabric-manager (dnf) below."""
        if int(branch) >= 580:
            return "nvidia-fabricmanager"
        if self.personality.package_manager == "dnf":
            return "nvidia-fabric-manager"
        return f"nvidia-fabricmanager-{branch}"

    def foreign_driver_versions(self, version: str) -> dict[str, str]:
        """Installed packages at a driver version (NNN.x) other than `version`: another branch's
        unversioned fabric manager, NSCQ or daemon (590 beside 580) shows here."""
        return {n: v for n, v in self.versions().items()
                if re.match(r"^(lib)?nvidia-|^cuda-drivers|^kmod-nvidia|^libxnvctrl", n)
                and re.match(r"^\d{3}\.", v) and not v.startswith(version + "-")}

    # ------------------------------------------------------------------ steps
    def fresh_check_is_read_only(self) -> None:
        res, diff = self.check("fresh-check")
        assert diff == [], diff[:40]
        assert res.changed(self.host) == 0, res.output[-4000:]
        assert res.tasks(self.host) <= MAX_CHECK_TASKS, res.tasks(self.host)
        st = self.statuses(res)
        assert st["preflight.gpu"] == "pass", st
        for cid in ("repo.source", "cuda.toolkit", "cudnn.version", "nccl.version", "env.path",
                    "driver.branch"):
            assert st[cid] == "drift", (cid, st)

    def converges_with_an_older_version_pinned(self) -> None:
        """The older driver version of the branch installs although a newer one exists (every
        component pinned), persistence mode is really on, and nothing forbidden is installed."""
        p = self.personality
        first = self.site("converge")
        assert first.rc == 0, first.output[-6000:]
        checks = first.checks(self.host)
        bad = {k: v for k, v in checks.items() if v["status"] in ("fail", "drift")}
        assert not bad, bad
        for cid in ("preflight.gpu", "repo.source", "driver.branch", "driver.version",
                    "driver.module_loaded", "driver.hold", "driver.pin", "driver.persistence",
                    "driver.fabricmanager", "driver.nouveau_blacklist", "driver.reboot",
                    "driver.next_boot", "cuda.toolkit", "cuda.symlink", "cuda.nvcc",
                    "cudnn.version", "cudnn.hold", "nccl.version", "nccl.hold", "env.path",
                    "env.ld_library_path", "env.ldconfig", "env.foreign_paths"):
            if cid == "driver.pin" and p.package_manager == "dnf":
                assert cid not in checks, checks[cid]  # apt preferences; EL: versionlock only
                continue
            assert checks[cid]["status"] == "pass", checks[cid]
        if p.torch:
            assert checks["pytorch.version"]["status"] == "pass", checks["pytorch.version"]
        assert int(first.report(self.host)["gpu_count"]) == 8
        assert first.report(self.host)["driver_userspace_version"] == p.old
        assert self.smi_driver() == p.old
        versions = self.versions()
        drv = versions.get(p.driver_package, "")
        assert drv.startswith(p.old + "-"), (p.driver_package, drv)
        # persistence mode really on, on every GPU
        modes = self.sh("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
        assert set(modes.split()) == {"Enabled"}, modes
        # the fabric manager at exactly the driver version on the NVSwitch box, and nothing of
        # another driver version (the newer branch's unversioned packages)
        fm = versions.get(self.fabricmanager(p.branch), "")
        assert fm.startswith(p.old + "-"), fm
        foreign = self.foreign_driver_versions(p.old)
        assert foreign == {}, foreign
        installed = set(versions)
        assert not installed & set(p.never_installed), installed & set(p.never_installed)
        held = self.held()
        for pkg in p.held_after_converge:
            assert pkg in held, (pkg, held)
        libs = {n: v for n, v in versions.items() if n.startswith(("libcudnn8", "libnccl"))}
        assert not any("cuda12.4" in v for v in libs.values()), libs

    def second_run_changes_nothing(self) -> None:
        second = self.site("second")
        assert second.rc == 0, second.output[-4000:]
        changed = [ln for ln in second.output.splitlines() if ln.startswith("changed:")]
        assert second.changed(self.host) == 0, changed
        assert REBOOT_HANDLER not in second.output

    def check_is_clean_and_read_only(self, name: str = "clean-check") -> None:
        res, diff = self.check(name)
        assert res.rc == 0, res.output[-4000:]
        assert diff == [], diff[:40]
        assert res.changed(self.host) == 0
        assert res.tasks(self.host) <= MAX_CHECK_TASKS, res.tasks(self.host)
        st = self.statuses(res)
        bad = {k: v for k, v in st.items() if v in ("drift", "fail")
               and (self.personality.torch or not k.startswith("pytorch."))}
        assert not bad, bad

    def drift_is_found_read_only(self) -> None:
        self.sh(self.personality.drift_script)
        check, diff = self.check("drift-check")
        assert diff == [], diff[:40]
        assert check.changed(self.host) == 0
        checks = check.checks(self.host)
        for cid, (status, needle) in self.personality.expected_drift.items():
            c = checks[cid]
            assert c["status"] == status, c
            assert needle in str(c["actual"]), c
            assert c["expected"] and c["remediation"], c
        if "driver.module_loaded" in self.personality.expected_drift:
            assert checks["driver.module_loaded"]["remediation"] == "reboot"
        # the foreign CUDA path is named by file and line, and the remediation is not the
        # command that is about to fail
        foreign = checks["env.foreign_paths"]
        assert "/etc/profile.d/zz-cuda-guide.sh:1" in foreign["actual"], foreign
        assert "zz-cuda-guide.sh" in checks["env.ld_library_path"]["remediation"]

    def site_repairs_the_drift(self) -> None:
        fix = self.site("repair")
        assert fix.rc == 0, fix.output[-6000:]
        held = self.held()
        for pkg in self.personality.held_after_converge:
            assert pkg in held, (pkg, held)  # holds removed by hand are back
        assert self.sh("readlink -f /usr/local/cuda").strip() == "/usr/local/cuda-12.1"
        guide = self.sh("cat /etc/profile.d/zz-cuda-guide.sh")
        assert all(ln.startswith("# provision: foreign CUDA path disabled")
                   for ln in guide.splitlines()), guide
        self.check_is_clean_and_read_only("green-check")

    def branch_change_moves_holds_and_reboots_once(self) -> None:
        p = self.personality
        boot = self.fleet.boot_id(self.host)
        up = self.site("upgrade", gpu_stack_driver_branch=p.other_branch,
                       gpu_stack_driver_version="")
        assert up.rc == 0, up.output[-6000:]
        assert up.output.count(REBOOT_HANDLER) == 1, up.output[-6000:]
        assert self.fleet.boot_id(self.host) != boot
        checks = up.checks(self.host)
        for cid in ("driver.branch", "driver.version", "driver.module_loaded", "driver.hold",
                    "driver.fabricmanager", "driver.persistence"):
            assert checks[cid]["status"] == "pass", checks[cid]
        assert self.smi_driver() == p.other_version
        versions = self.versions()
        fm = versions.get(self.fabricmanager(p.other_branch), "")
        assert fm.startswith(p.other_version + "-"), fm
        foreign = self.foreign_driver_versions(p.other_version)
        assert foreign == {}, foreign
        again = self.site("upgrade-again", gpu_stack_driver_branch=p.other_branch,
                          gpu_stack_driver_version="")
        assert again.rc == 0, again.output[-4000:]
        assert again.changed(self.host) == 0, [
            ln for ln in again.output.splitlines() if ln.startswith("changed:")]
        assert REBOOT_HANDLER not in again.output

    def no_reboot_defers_and_the_next_run_reboots_once(self) -> None:
        """Back from the other branch to the pin with --no-reboot: packages change, the host
        keeps the other branch's module, the rest converges, validation does not run; exit 1 with
        driver.reboot "reboot required". The next run reboots once."""
        p = self.personality
        boot = self.fleet.boot_id(self.host)
        extra = ["-e", f"gpu_stack_driver_branch={p.branch}",
                 "-e", f"gpu_stack_driver_version={p.old}",
                 "-e", "gpu_stack_preflight_min_free_gib=1"]
        if not p.torch:
            extra += ["--skip-tags", "pytorch,validation"]
        proc, data = provision_cli(self.work / "no-reboot", *fleet_args(self.fleet),
                                   "--no-reboot", *extra)
        assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
        assert self.fleet.boot_id(self.host) == boot, "--no-reboot rebooted the host"
        h = data["hosts"][self.host]
        assert h["status"] == "failed"
        checks = {c["id"]: c for c in h["checks"]}
        assert checks["driver.reboot"]["status"] == "fail", checks["driver.reboot"]
        assert checks["driver.reboot"]["message"] == "reboot required"
        assert checks["driver.module_loaded"]["status"] == "fail", checks["driver.module_loaded"]
        assert checks["driver.branch"]["status"] == "pass", checks["driver.branch"]
        for cid in ("cuda.toolkit", "cudnn.version", "nccl.version", "env.path"):
            assert checks[cid]["status"] == "pass", checks[cid]
        if p.torch:
            for cid in ("validation.allreduce", "validation.ddp"):
                assert checks[cid]["status"] == "fail", checks[cid]
                assert "reboot required" in checks[cid]["message"], checks[cid]
            assert not h.get("validation"), h.get("validation")
        smi = self.fleet.run(self.host,
                             "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0")
        assert smi.rc == 18 and "version mismatch" in smi.stdout, smi
        # the reboot is the driver role's: run that role alone
        done = run_playbook(self.fleet, "site.yml", self.ev(), tmp=self.work / "after-no-reboot",
                            tags="nvidia_driver")
        assert done.rc == 0, done.output[-6000:]
        assert done.output.count(REBOOT_HANDLER) == 1, done.output[-6000:]
        assert self.fleet.boot_id(self.host) != boot
        after = done.checks(self.host)
        for cid in ("driver.version", "driver.module_loaded", "driver.reboot",
                    "driver.fabricmanager", "driver.persistence"):
            assert after[cid]["status"] == "pass", after[cid]
        assert self.smi_driver() == p.old
        foreign = self.foreign_driver_versions(p.old)
        assert foreign == {}, foreign


def run_all(scenario: Scenario) -> None:
    scenario.fresh_check_is_read_only()
    scenario.converges_with_an_older_version_pinned()
    scenario.second_run_changes_nothing()
    scenario.check_is_clean_and_read_only()
    scenario.drift_is_found_read_only()
    scenario.site_repairs_the_drift()
    scenario.branch_change_moves_holds_and_reboots_once()
    scenario.no_reboot_defers_and_the_next_run_reboots_once()
