# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The environment component: PATH, LD_LIBRARY_PATH and the dynamic linker for the stack's CUDA
(role cuda_env).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any, TypedDict

from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
    flag,
)

NAMES = ("env",)
ROLE = "cuda_env"

CHECKS = (
    CheckSpec(
        "env.foreign_paths",
        (
            "no login-shell file exports another CUDA toolkit's bin or lib64 (names the "
            "file and line)"
        ),
        (
            "run `provision` (comments out such lines in /etc/profile.d and "
            "/etc/environment); elsewhere edit the named file"
        ),
    ),
    CheckSpec(
        "env.ld_library_path",
        "LD_LIBRARY_PATH holds the toolkit's lib64 and only paths that exist",
        "run `provision` on the host",
    ),
    CheckSpec(
        "env.ldconfig",
        (
            "ldconfig -p lists the CUDA libraries (ld.so.conf.d entry), the dynamic "
            "linker resolves none of them from another CUDA toolkit's directory, and no "
            "/etc/ld.so.conf.d file lists another CUDA's directory"
        ),
        (
            "run `provision` (comments out other CUDA directories in /etc/ld.so.conf.d "
            "and runs ldconfig)"
        ),
    ),
    CheckSpec(
        "env.path",
        "a login shell finds the stack's nvcc first on PATH (/etc/profile.d)",
        "run `provision` on the host",
    ),
    CheckSpec(
        "env.user_shell_files",
        (
            "no shell file of the named users (gpu_stack_env_users: ~/.bashrc, "
            "~/.profile, ...) exports another CUDA toolkit's bin or lib64 (names the file"
            " and line)"
        ),
        "edit the named file and line (provision never edits a user's dotfiles)",
    ),
)


class EnvPlan(TypedDict):
    """provision_plan.env: what the cuda_env role carries out."""

    prefix: str
    toolkit_installed: bool
    profile_file: str
    profile_content: str
    ldconf_file: str
    ldconf_content: str
    neutralize: list[dict[str, str]]  # {path, content}: profile.d files with another CUDA's paths
    neutralize_ldconf: list[dict[str, str]]  # {path, content}: ld.so.conf.d files likewise
    blocked: list[str]  # "path:line: text" the role does not edit (a user's or a foreign file)


# EnvPlan fields no role reads, each with the reason (tests/unit/test_plan_fields.py)
PLAN_REPORT_ONLY: dict[str, str] = {}


class Env(Facts):
    """Judges env (methods of the one Judge: evaluate.py)."""

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
        record: EnvPlan = {
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
        self.plan["env"] = record

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


def _foreign_cuda_dir(path: str, cuda: str) -> bool:
    """A path inside another CUDA toolkit's directory (/usr/local/cuda-11.3/...): not the stack's
    version, nor its major-version alias (/usr/local/cuda-12) or /usr/local/cuda."""
    m = re.match(r"^/usr/local/cuda-(\d+(?:\.\d+)?)/", path)
    return m is not None and m.group(1) not in (cuda, cuda.split(".", maxsplit=1)[0])


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
