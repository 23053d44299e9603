"""Stack manifest: schema, defaults, matrix rules, role variables."""

from __future__ import annotations

import ast
import datetime
import re
from pathlib import Path

import pytest
import yaml

from provisioner import stack
from provisioner.exitcodes import ExitCode, StackError

REPO = Path(__file__).resolve().parents[2]


def _err(user: dict) -> str:
    with pytest.raises(StackError) as info:
        stack.resolve(user)
    assert info.value.exit_code == ExitCode.USAGE
    return str(info.value.message)


def test_default_stack_is_the_issue_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20 item 3: the default branch is a supported one that runs CUDA 12.1 (R580 LTSB,
    supported until 2028-06): no end-of-support warning on the day it became the default."""
    monkeypatch.setattr(stack, "_today", lambda: datetime.date(2026, 12, 4))
    s = stack.load(None)
    d = s.data
    assert d["driver"] == {
        "branch": "580",
        "version": None,
        "flavor": "proprietary",
        "fabricmanager": "auto",
    }
    assert d["cuda"]["version"] == "12.1"
    assert d["cudnn"]["version"] == "8.9.2.26"
    assert d["nccl"]["version"] == "2.18.3"
    assert d["pytorch"]["version"] == "2.5.1"
    assert d["pytorch"]["build"] == "cu121"
    assert d["mirrors"]["pytorch_index"] == "https://download.pytorch.org/whl/cu121"
    assert s.warnings == ()
    assert s.distro_warning is not None
    assert "ubuntu2404/x86_64" in s.distro_warning
    assert "ubuntu2404/x86_64" in s.distro_warning


def test_a_branch_past_nvidias_end_of_support_is_a_warning_naming_date_source_and_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 20 item 3: R535 support ended June 2026 (NVIDIA's supported-drivers page, in the
    matrix with its source): from July 2026 a stack on 535 warns in `stack validate` and before
    every run, naming the date, the source and the supported branches; 535 stays selectable."""
    branches = stack.load_matrix()["driver"]["branches"]
    assert branches["535"]["end_of_support"] == "2026-06"
    assert branches["580"]["end_of_support"] == "2028-06"
    for b, row in branches.items():
        assert row["source"].startswith("https://docs.nvidia.com/"), b
        assert row["confidence"] in ("C", "P", "U"), b
    monkeypatch.setattr(stack, "_today", lambda: datetime.date(2026, 7, 1))
    on_535 = stack.resolve({"driver": {"branch": "535"}})
    (warning,) = [w for w in on_535.warnings if "end of support" in w]
    assert "driver branch 535 is past NVIDIA's end of support" in warning
    assert "2026-06" in warning and "supported-drivers-and-cuda-toolkit-versions" in warning
    assert "580 (LTSB, supported until 2028-06)" in warning
    assert not [w for w in stack.resolve({"driver": {"branch": "580"}}).warnings
                if "end of support" in w]
    monkeypatch.setattr(stack, "_today", lambda: datetime.date(2026, 6, 30))
    assert not [w for w in stack.resolve({"driver": {"branch": "535"}}).warnings
                if "end of support" in w]


def test_mirror_declaring_carries_silences_the_distro_warning() -> None:
    s = stack.resolve(
        {
            "mirrors": {
                "nvidia_repo_carries": ["debian12/x86_64", "ubuntu2404/x86_64", "ubuntu2404/sbsa"]
            }
        }
    )
    assert s.distro_warning is None
    partial = stack.resolve({"mirrors": {"nvidia_repo_carries": ["debian12/x86_64"]}})
    assert partial.distro_warning is not None
    assert "debian12" not in partial.distro_warning


@pytest.mark.parametrize(
    ("user", "rule"),
    [
        (
            {"driver": {"branch": "525"}},
            "driver branch 525 is below the minimum 530.30.02 for CUDA 12.1",
        ),
        (
            {"driver": {"branch": "535", "version": "550.54.15"}},
            "driver version 550.54.15 is not in branch 535",
        ),
        (
            {"driver": {"branch": "530", "version": "530.20.01"}},
            "driver version 530.20.01 is below the minimum 530.30.02 for CUDA 12.1",
        ),
        (
            {"driver": {"branch": "535", "flavor": "vendor"}},
            "driver.flavor: 'vendor' is not one of proprietary, open",
        ),
        (
            {"pytorch": {"version": "2.6.0"}},
            "torch 2.6.0 has no cu121 wheels (cu121 wheels exist for 2.1.0 to 2.5.1)",
        ),
        ({"pytorch": {"version": "2.0.1"}}, "torch 2.0.1 has no cu121 wheels"),
        (
            {"pytorch": {"version": "2.5.1", "torchvision": "0.19.0"}},
            "torchvision 0.19.0 does not pair with torch 2.5.1",
        ),
        ({"pytorch": {"torchaudio": "2.4.0"}}, "torchaudio 2.4.0 does not pair with torch 2.5.1"),
        ({"cudnn": {"version": "7.6.5.32"}}, "cuDNN 7.x has no build for CUDA 12.1"),
        ({"cudnn": {"version": "8.6.0.163"}}, "cuDNN 8.6.0.163 has no build for CUDA 12.1"),
        ({"cuda": {"version": "11.8"}}, "CUDA 11.8 is not in the compatibility matrix"),
        ({"pytorch": {"build": "cu118"}}, "pytorch.build: 'cu118' is not one of cu121, cpu"),
        (
            {"validation": {"nproc_per_node": "many"}},
            "validation.nproc_per_node: 'many' is not 'auto' or a positive integer",
        ),
        ({"validation": {"nproc_per_node": 0}}, "validation.nproc_per_node: must be a positive"),
        (
            {"mirrors": {"nvidia_repo_carries": ["debian12"]}},
            "mirrors.nvidia_repo_carries: 'debian12' is not <distro>/<arch>",
        ),
        (
            {"mirrors": {"nvidia_repo": "ftp://mirror/cuda"}},
            "mirrors.nvidia_repo: 'ftp://mirror/cuda'",
        ),
        ({"pytorch": {"venv": "opt/pytorch"}}, "pytorch.venv: 'opt/pytorch' must be an absolute"),
        ({"schema": 2}, "schema: 2 is not one of 1"),
        (
            {"validation": {"thresholds": {"bogus_key": 5}}},
            "validation.thresholds.bogus_key: unknown key",
        ),
        (
            {"validation": {"thresholds": {"allreduce_busbw_gbps": "abc"}}},
            "validation.thresholds.allreduce_busbw_gbps: expected a number, got str 'abc'",
        ),
        (
            {"validation": {"thresholds": {"ddp_scaling_efficiency": 1.5}}},
            "validation.thresholds.ddp_scaling_efficiency: 1.5 is out of range (must be in (0, 1])",
        ),
    ],
)
def test_bad_combinations_name_the_rule(user: dict, rule: str) -> None:
    assert rule in _err(user)


@pytest.mark.parametrize(
    ("user", "path"),
    [
        ({"driver": {"brnach": "535"}}, "driver.brnach: unknown key"),
        ({"drivers": {}}, "drivers: unknown key"),
        ({"validation": {"threshold": {}}}, "validation.threshold: unknown key"),
        ({"mirrors": {"pytorch_index_url": "x"}}, "mirrors.pytorch_index_url: unknown key"),
    ],
)
def test_unknown_keys_are_errors_naming_the_key_path(user: dict, path: str) -> None:
    assert path in _err(user)


def test_yaml_numbers_for_versions_are_refused_with_a_hint() -> None:
    msg = _err({"cuda": {"version": 12.1}})
    assert 'cuda.version: 12.1 is a YAML number; quote it as a string ("12.1")' in msg


def test_integer_branch_is_accepted() -> None:
    assert stack.resolve({"driver": {"branch": 550}}).data["driver"]["branch"] == "550"


def test_all_errors_are_reported_together() -> None:
    msg = _err({"driver": {"brnach": 1}, "cuda": {"verison": "12.1"}})
    assert "driver.brnach" in msg
    assert "cuda.verison" in msg


@pytest.mark.parametrize(
    "user",
    [
        {"driver": {"branch": "550", "flavor": "open"}},
        {"driver": {"branch": "535", "version": "535.129.03", "fabricmanager": "always"}},
        {"cudnn": {"version": "9.1.0.70"}},
        {"pytorch": {"version": "2.1.0", "torchvision": "0.16.0", "torchaudio": "2.1.0"}},
        {"pytorch": {"version": "2.13.0", "build": "cpu"}},
        {
            "validation": {
                "nproc_per_node": 4,
                "backend": "gloo",
                "thresholds": {"allreduce_busbw_gbps": 100, "straggler_ratio": 0.8},
            }
        },
    ],
)
def test_good_combinations(user: dict) -> None:
    stack.resolve(user)


def test_open_flavor_warns_about_gpu_generations() -> None:
    s = stack.resolve({"driver": {"branch": "550", "flavor": "open"}})
    assert any("turing" in w for w in s.warnings)


def test_unlisted_library_builds_are_warnings() -> None:
    s = stack.resolve({"nccl": {"version": "2.19.3"}, "cudnn": {"version": "8.9.7.29"}})
    assert any("NCCL 2.19.3" in w for w in s.warnings)
    assert any("cuDNN 8.9.7.29" in w for w in s.warnings)


def test_stack_file_load_and_name_from_file(tmp_path: Path) -> None:
    f = tmp_path / "lab-fleet.yml"
    f.write_text("driver:\n  branch: '550'\npytorch: {version: '2.13.0', build: cpu}\n")
    s = stack.load(f)
    assert s.name == "lab-fleet"
    assert s.data["driver"]["branch"] == "550"
    assert s.data["cuda"]["version"] == "12.1"  # default filled in
    assert s.source == str(f)


def test_stack_file_errors(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"missing\.yml: not found"):
        stack.load(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("driver: [unclosed\n")
    with pytest.raises(StackError, match="not valid YAML"):
        stack.load(bad)
    lst = tmp_path / "list.yml"
    lst.write_text("- a\n")
    with pytest.raises(StackError, match="expected a mapping"):
        stack.load(lst)


def _leaves(doc: dict) -> set[tuple[str, str]]:
    return {(sec, key) for sec, sub in doc.items() if isinstance(sub, dict) for key in sub}


DERIVED = {
    "gpu_stack_pytorch_python_range",
    "gpu_stack_cuda_min_driver",
    "gpu_stack_cudnn_build",
    "gpu_stack_nccl_build",
    "gpu_stack_cuda_distros",
    "gpu_stack_driver_support",
}


def test_stack_vars_name_every_leaf_of_the_default_stack() -> None:
    default = yaml.safe_load((REPO / "provisioner" / "data" / "default-stack.yml").read_text())
    assert set(stack.STACK_VARS.values()) == _leaves(default)
    for var, (section, key) in stack.STACK_VARS.items():
        assert var == f"gpu_stack_{section}_{key}"


def test_to_extravars_produces_exactly_the_role_variables() -> None:
    s = stack.load(None)
    ev = s.to_extravars()
    assert set(ev) == {*stack.STACK_VARS, *DERIVED, "nvidia_driver_allow_reboot"}
    for var, (section, key) in stack.STACK_VARS.items():
        value = s.data[section][key]
        assert ev[var] == ("" if value is None else value), var
    assert ev["gpu_stack_driver_version"] == ""  # null becomes ""
    assert ev["gpu_stack_cuda_version"] == s.cuda_version
    assert ev["nvidia_driver_allow_reboot"] is True
    assert s.to_extravars(allow_reboot=False)["nvidia_driver_allow_reboot"] is False
    matrix = stack.load_matrix()
    row = matrix["cuda"][s.cuda_version]
    assert ev["gpu_stack_cuda_min_driver"] == row["min_driver"]["version"]
    cudnn_rows = {r["major"]: r for r in row["cudnn"]}
    assert ev["gpu_stack_cudnn_build"] == cudnn_rows[s.cudnn_major]["build"]
    assert ev["gpu_stack_nccl_build"] == row["nccl"][0]["build"]
    nine = stack.resolve({"cudnn": {"version": "9.1.0.70"}}).to_extravars()
    assert nine["gpu_stack_cudnn_build"] == cudnn_rows[9]["build"] != ev["gpu_stack_cudnn_build"]
    # where NVIDIA publishes the stack's CUDA: the preflight role stops a host where it does not
    assert ev["gpu_stack_cuda_distros"]["debian12/x86_64"] == "absent"
    assert ev["gpu_stack_cuda_distros"]["ubuntu2204/x86_64"] == "published"
    assert ev["gpu_stack_cuda_distros"]["ubuntu2404/x86_64"] == "absent"  # issue 20 item 4
    # the Python range of the stack's torch wheels (matrix), for preflight; none for CPU builds
    assert ev["gpu_stack_pytorch_python_range"] == ["3.9", "3.12"]
    old = stack.resolve({"pytorch": {"version": "2.1.2", "torchvision": "0.16.2"}})
    assert old.to_extravars()["gpu_stack_pytorch_python_range"] == ["3.8", "3.11"]
    cpu = stack.resolve({"pytorch": {"build": "cpu", "version": "2.13.0"}})
    assert cpu.to_extravars()["gpu_stack_pytorch_python_range"] == []


VERSION_LITERAL = re.compile(r"(?<![\d.])(12\.1|cu121|8\.9\.2|2\.18\.3|535)(?![\d])")


def test_no_version_literal_in_the_cli_code() -> None:
    """The stack data (default-stack.yml, matrix.yml) is the only place a version is written."""
    hits = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for p in sorted((REPO / "provisioner").rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if VERSION_LITERAL.search(line)
    ]
    assert hits == []


def test_the_version_literal_pattern_finds_what_it_should() -> None:
    for text in ('"12.1"', "cu121", "8.9.2.26", "2.18.3", 'branch "535"'):
        assert VERSION_LITERAL.search(text), text
    for text in ("65535", "12.10", "1535x"):
        assert not VERSION_LITERAL.search(text), text


def test_matrix_sources_are_public() -> None:
    text = (REPO / "provisioner" / "data" / "matrix.yml").read_text(encoding="utf-8")
    assert "nvidia-facts" not in text
    assert "shared/" not in text
    matrix = yaml.safe_load(text)
    rows = [matrix["driver"]["open_kernel_modules"], matrix["pytorch"]["cu121"]]
    for cuda in matrix["cuda"].values():
        rows += [cuda["min_driver"], *cuda["cudnn"], *cuda["nccl"], *cuda["distros"]]
    for row in rows:
        assert re.search(r"https://|[\w.-]+/[\w.-]+(:[\w./-]+|#\d+)", row["source"]), row


def test_every_matrix_row_has_source_and_confidence() -> None:
    matrix = yaml.safe_load((REPO / "provisioner" / "data" / "matrix.yml").read_text())
    rows = []
    for cuda in matrix["cuda"].values():
        rows.append(cuda["min_driver"])
        rows += cuda["cudnn"] + cuda["nccl"] + cuda["distros"]
    rows.append(matrix["driver"]["open_kernel_modules"])
    rows.append(matrix["pytorch"]["cu121"])
    for row in rows:
        assert row["source"], row
        assert row["confidence"] in ("C", "P", "U"), row


def test_threshold_keys_are_the_validation_programs_override_keys() -> None:
    src = (REPO / "roles/validation/files/provision_validate/thresholds.py").read_text()
    m = re.search(r"^OVERRIDE_KEYS = (\(.*?\))$", src, re.M)
    assert m, "OVERRIDE_KEYS not found in the validation program"
    assert tuple(ast.literal_eval(m.group(1))) == stack.THRESHOLD_KEYS


def test_duplicate_keys_in_a_stack_file_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "dup.yml"
    f.write_text('driver:\n  branch: "535"\ncuda:\n  version: "12.1"\ndriver:\n  branch: "550"\n')
    with pytest.raises(StackError, match="duplicate key 'driver'"):
        stack.load(f)


def test_matrix_says_what_the_default_torch_really_uses() -> None:
    """Issue 11 item 12: the default torch bundles its own cuDNN and NCCL (what training uses); the
    matrix's cuDNN row must not pass the system package off as torch's."""
    s = stack.load(None)
    matrix = stack.load_matrix()
    rel = matrix["pytorch"][s.data["pytorch"]["build"]]["releases"][s.data["pytorch"]["version"]]
    assert rel["bundled"] == {"cudnn": "9.1.0.70", "nccl": "2.21.5"}
    row = next(r for r in matrix["cuda"][s.cuda_version]["cudnn"] if r["major"] == s.cudnn_major)
    assert "PyTorch does not use it" in row["source"]
    assert str(rel["bundled"]["cudnn"]).split(".")[0] != str(s.cudnn_major)


H = "--hash=sha256:" + "a" * 64


def test_a_find_links_mirror_alone_needs_hashes_naming_the_format() -> None:
    """Issue 14: every download verified. A find-links directory serves no hashes pip can check."""
    msg = _err({"mirrors": {"pytorch_index": None, "pytorch_find_links": "http://m/wheels/"}})
    assert "mirrors.pytorch_hashes" in msg and "pip-compile --generate-hashes" in msg
    ok = {
        "pytorch": {"version": "2.13.0", "build": "cpu"},
        "mirrors": {
            "pytorch_index": None,
            "pytorch_find_links": "http://m/wheels/",
            "pytorch_hashes": [f"torch==2.13.0+cpu {H}", f"filelock==3.0 {H} {H}"],
        },
    }
    assert stack.resolve(ok).to_extravars()["gpu_stack_mirrors_pytorch_hashes"] == [
        f"torch==2.13.0+cpu {H}",
        f"filelock==3.0 {H} {H}",
    ]


@pytest.mark.parametrize(
    ("hashes", "rule"),
    [
        (["torch==2.13.0"], "is not 'name==version --hash=sha256:<64 hex>'"),
        ([f"torch>=2.13.0 {H}"], "is not 'name==version"),
        (["torch==2.13.0 --hash=md5:abc"], "is not 'name==version"),
        ([f"filelock==3.0 {H}"], "pins torch (not at all), the stack wants 2.13.0+cpu"),
        ([f"torch==2.12.0 {H}"], "pins torch 2.12.0, the stack wants 2.13.0+cpu"),
    ],
)
def test_bad_hash_lists_name_the_line(hashes: list[str], rule: str) -> None:
    user = {
        "pytorch": {"version": "2.13.0", "build": "cpu"},
        "mirrors": {"pytorch_find_links": "http://m/wheels/", "pytorch_hashes": hashes},
    }
    assert rule in _err(user)
