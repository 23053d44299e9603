# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The repository component: NVIDIA's package repository, its key and source entry (role
nvidia_repo).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any, TypedDict

from ansible_collections.provision.gpu.plugins.module_utils import crb
from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
)
from ansible_collections.provision.gpu.plugins.module_utils.platforms import (
    upstream_version,
)

NAMES = ("repo",)
ROLE = "nvidia_repo"

CHECKS = (
    CheckSpec(
        "repo.contrib",
        (
            "Debian only: Debian's archive entries include contrib, which NVIDIA's Debian"
            " driver packages depend on"
        ),
        "run `provision` on the host (it adds contrib)",
    ),
    CheckSpec(
        "repo.driver_build",
        (
            "Debian: NVIDIA's repository carries nvidia-driver-cuda at the stack's branch"
            " (or exact version), asked with apt-cache policy after the repository is set"
            " up"
        ),
        "choose a driver branch or version the repository carries",
    ),
    CheckSpec(
        "repo.key",
        (
            "Debian family: the keyring apt checks NVIDIA's repository with "
            "(/usr/share/keyrings/cuda-archive-keyring.gpg, from cuda-keyring) holds one "
            "of gpu_stack_repo_key_fingerprints (NVIDIA's key 3bf863cc by default); a "
            "keyring from a mirror that is not NVIDIA's stops the run before any package "
            "comes from it"
        ),
        (
            "compare the keyring with NVIDIA's key (gpg --show-keys); for a mirror "
            "re-signed with a site key, add that key's fingerprint to "
            "gpu_stack_repo_key_fingerprints"
        ),
    ),
    CheckSpec(
        "repo.package_state",
        (
            "Debian family: dpkg's last run finished (no journal left, no half-configured"
            " package): an install cut short by a lost connection, Ctrl-C or a reboot "
            "blocks apt"
        ),
        (
            "run `provision` on the host (dpkg --configure -a, then apt-get --fix-broken "
            "install)"
        ),
    ),
    CheckSpec(
        "repo.source",
        (
            "exactly one sources entry (or .repo) for NVIDIA's repository, and it carries"
            " the stack's CUDA toolkit"
        ),
        (
            "run `provision` on the host; on a mirror, declare "
            "mirrors.nvidia_repo_carries or add the packages"
        ),
    ),
)


class _RepoPlanAll(TypedDict):
    """The keys of provision_plan.repo on every OS family."""

    url: str  # the repository's URL, with a trailing slash
    remove: list[str]  # sources/repo files that carry the repository besides the managed one
    rewrite: list[dict[str, str]]  # {path, content}: sources files rewritten in place
    dpkg_repair: bool
    dpkg_reinstall: list[str]


class RepoPlan(_RepoPlanAll, total=False):
    """provision_plan.repo: what the nvidia_repo role carries out. The apt keys are present on
    the apt families only, the dnf keys on the Red Hat family only (each family's tasks read
    their own)."""

    # apt
    list_file: str
    list_content: str
    keyring_deb: str
    keyring_installed: bool
    remove_old_key: bool
    old_key_kept_for: list[str]  # "path:line" of NVIDIA entries that still need the old key
    # dnf
    repo_id: str
    repo_file: str
    gpgkey: str
    crb: crb.CrbPlan


# RepoPlan fields no role reads, each with the reason (tests/unit/test_plan_fields.py)
PLAN_REPORT_ONLY = {
    "repo_file": "the .repo path yum_repository writes for repo_id; the judge keeps it out of "
    "remove",
}


class Repo(Facts):
    """Judges repo (methods of the one Judge: evaluate.py)."""

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
        plan: RepoPlan = {
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
            # CodeReady Builder for EPEL's dkms: crb, subscription-manager, or the RHUI id
            plan["crb"] = crb.choose(plat.os_id, plat.major, plat.arch, files)
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
