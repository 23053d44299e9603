# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The PyTorch component: the venv, the torch build for the stack's CUDA, verified wheels (role
pytorch).
"""

from __future__ import absolute_import, annotations, division, print_function

from typing import Any, TypedDict

from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
    flag,
)

NAMES = ("pytorch",)
ROLE = "pytorch"

CHECKS = (
    CheckSpec(
        "pytorch.cuda",
        (
            "inside the venv, torch.version.cuda is the stack's CUDA and CUDA, NCCL and "
            "cuDNN work (CPU builds report none)"
        ),
        (
            "run `provision` on the host; a driver too old for the CUDA build shows here"
        ),
    ),
    CheckSpec(
        "pytorch.hashes",
        (
            "the torch wheels are verified by sha256: from an index (pip checks the "
            "hashes its links carry) or, with a find-links mirror, from "
            "mirrors.pytorch_hashes (pip --require-hashes); without either nothing is "
            "installed"
        ),
        (
            "list the wheels' pins and sha256 in mirrors.pytorch_hashes (pip-compile "
            "--generate-hashes), or use an index"
        ),
    ),
    CheckSpec(
        "pytorch.version",
        (
            "the venv holds the stack's torch (and torchvision/torchaudio when given) "
            "from the stack's index"
        ),
        "run `provision` on the host",
    ),
)


class PytorchPlan(TypedDict):
    """provision_plan.pytorch: what the pytorch role carries out."""

    venv: str
    python: str  # the interpreter the venv is created with
    venv_python: str
    create_venv: bool
    install: list[str]  # requirements to install; [] when torch matches or hashes are refused
    pip_args: list[str]  # index/find-links arguments
    install_args: list[str]  # pip install's arguments (pip_args + requirements or -r file)
    requirements_file: str  # "" without hashes
    requirements_content: str


# PytorchPlan fields no role reads, each with the reason (tests/unit/test_plan_fields.py)
PLAN_REPORT_ONLY = {
    "pip_args": "the index arguments, already the head of install_args",
}


class Pytorch(Facts):
    """Judges pytorch (methods of the one Judge: evaluate.py)."""

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
        record: PytorchPlan = {
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
        self.plan["pytorch"] = record
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
