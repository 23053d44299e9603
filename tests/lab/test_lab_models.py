"""The repository models (lab/repos/*.yml): every fact has a source, and the README lists the
unconfirmed ones. Runs without root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab import repo_model as model
from lab.repo import ARCHIVE_MODELS, NVIDIA_MODELS

README = Path(model.__file__).resolve().parent / "README.md"


@pytest.mark.parametrize("name", model.model_names())
def test_every_package_unit_and_set_has_source_and_confidence(name):
    m = model.load(name)
    assert m.packages
    for pkg in m.packages:
        assert pkg.source and all(s.strip() for s in pkg.source), pkg.name
        assert pkg.confidence in model.CONFIDENCE, pkg.name
        assert not any("/work/" in s for s in pkg.source), pkg.name  # public sources only
    for unit in m.units.values():
        assert unit["source"] and unit["confidence"] in model.CONFIDENCE
    for s in m.sets:
        assert s["source"] and s["confidence"] in model.CONFIDENCE


def test_served_models_exist():
    assert set(NVIDIA_MODELS) | set(ARCHIVE_MODELS) <= set(model.model_names())


def test_ubuntu2204_shapes():
    m = model.load("ubuntu2204-x86_64")
    drv = m.package("nvidia-driver-535", "535.129.03-0ubuntu1")
    exact = [d for d in drv.relations["depends"] if "(= 535.129.03-0ubuntu1)" in d]
    assert len(exact) >= 11
    utils = m.package("nvidia-compute-utils-535", "535.129.03-0ubuntu1")
    assert "nvidia-persistenced" in utils.relations["provides"]
    assert "nvidia-persistenced" in utils.relations["conflicts"]
    unit = m.units["ubuntu-nvidia-persistenced"]["text"]
    assert "--no-persistence-mode" in unit and "[Install]" not in unit
    assert m.package("nvidia-persistenced", "580.65.06-0ubuntu1")
    meta = m.package("cuda-drivers-535", "535.129.03-1")
    assert "nvidia-driver-535 (>= 535.129.03)" in meta.relations["depends"]


def test_ubuntu2204_580_is_nvidias_build_with_unversioned_names_and_a_newer_branch_beside_it():
    """NVIDIA's 580 builds: exact-version components, the daemon in its own unversioned package
    (nvidia-compute-utils-580 no longer provides it), an unversioned firmware name, and the
    unversioned fabric manager / NSCQ / daemon at every 580 release AND at 590.48.01 (the
    candidate a 580 host gets unless it pins them: NVIDIA/gpu-driver-container#735)."""
    m = model.load("ubuntu2204-x86_64")
    old, new = "580.65.06-0ubuntu1", "580.95.05-0ubuntu1"
    drv = m.package("nvidia-driver-580", old)
    assert len([d for d in drv.relations["depends"] if f"(= {old})" in d]) >= 11
    utils = m.package("nvidia-compute-utils-580", old)
    assert "nvidia-persistenced" not in utils.relations.get("provides", [])
    assert "nvidia-persistenced (>= 580.65.06)" in utils.relations["depends"]
    assert m.package("nvidia-firmware-580", new) and m.package("libnvidia-gpucomp-580", new)
    for name, versions in (
        ("nvidia-fabricmanager", ("580.65.06-1", "580.95.05-1", "590.48.01-1")),
        ("libnvidia-nscq", ("580.65.06-1", "580.95.05-1", "590.48.01-1")),
        ("nvidia-persistenced", (old, new, "590.48.01-1ubuntu1")),
    ):
        assert sorted(p.version for p in m.packages if p.name == name) == sorted(versions), name
    fm = m.package("nvidia-fabricmanager", "580.65.06-1")
    assert "nvidia-fabricmanager-580" in fm.relations["provides"]
    meta = m.package("cuda-drivers-580", new)
    assert meta.relations["depends"][0] == "nvidia-driver-580 (>= 580.95.05)"


def test_debian_models_use_debian_names_and_debian12_has_no_cuda_12_1():
    d11 = model.load("debian11-x86_64").names()
    assert {
        "nvidia-driver",
        "nvidia-driver-cuda",
        "nvidia-kernel-dkms",
        "nvidia-kernel-open-dkms",
        "cuda-drivers",
        "cuda-toolkit-12-1",
    } <= d11
    assert not {n for n in d11 if re.fullmatch(r"nvidia-driver-\d+", n)}
    d12 = model.load("debian12-x86_64").names()
    assert "cuda-toolkit-12-1" not in d12 and "cuda-toolkit-12-4" in d12


def test_readme_lists_every_unconfirmed_fact():
    """Every U fact of every model has a README row naming it (`subject`) and its model."""
    lines = README.read_text(encoding="utf-8").splitlines()
    missing = []
    for name in model.model_names():
        for fact in model.facts(model.load(name)):
            rows = [line for line in lines if f"`{fact.subject}`" in line]
            if not any(name in row for row in rows):
                missing.append(f"{name}: {fact.subject} ({fact.what})")
    assert not missing, "lab/README.md does not list: " + "; ".join(sorted(set(missing)))


def test_jammy_updates_carries_canonicals_newer_535_under_nvidias_names():
    """Canonical's non-server 535 in jammy-updates: NVIDIA's names, a newer version, Canonical's
    revision scheme and exact dependencies; the ubuntu2204 keyring ships the pin-600 file."""
    upd = model.load("ubuntu-jammy-updates")
    assert upd.data["suite"] == "jammy-updates" and upd.data["release"]["origin"] == "Ubuntu"
    drv = upd.package("nvidia-driver-535", "535.288.01-0ubuntu0.22.04.1")
    assert "libnvidia-compute-535 (= 535.288.01-0ubuntu0.22.04.1)" in drv.relations["depends"]
    nvidia = model.load("ubuntu2204-x86_64")
    newest = max(p.version for p in nvidia.packages if p.name == "nvidia-driver-535")
    assert newest < drv.version  # NVIDIA's newest 535 in the model is older
    assert not {n for n in upd.names() if "fabricmanager" in n or "nscq" in n}  # not modelled
    pin = nvidia.data["keyring"]["pin"]
    assert pin["path"] == "/etc/apt/preferences.d/cuda-repository-pin-600"
    assert "Package: *\nPin: release l=NVIDIA CUDA\nPin-Priority: 600\n" in pin["text"]
