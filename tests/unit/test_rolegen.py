"""Role defaults, argument specs and README variable tables come from one schema (make roles)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner import stack as stk
from tools import rolegen

REPO = Path(__file__).resolve().parents[2]
VERSION_LITERAL = re.compile(r"12\.1|cu121|8\.9\.2|2\.18\.3|\b535\b")


def test_generated_role_files_are_fresh() -> None:
    """Fails when someone edits a role's defaults/argument_specs/README table by hand, or changes
    the schema or the default stack without `make roles`."""
    assert rolegen.main(["--check"]) == 0


def test_every_role_variable_is_specified_and_role_prefixed() -> None:
    schema = rolegen.load_schema()
    for role, spec in schema["roles"].items():
        for name in spec.get("variables") or {}:
            assert name.startswith(role + "_"), name
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        assert set(specs["argument_specs"]["main"]["options"]) == set(spec.get("variables") or {})
    on_disk = {p.parent.parent.name for p in REPO.glob("roles/*/meta/main.yml")}
    assert on_disk == set(schema["roles"])


def test_no_version_literal_in_role_code_outside_the_generated_defaults() -> None:
    hits = []
    for path in [
        *REPO.glob("roles/*/tasks/*.yml"),
        *REPO.glob("roles/*/vars/*.yml"),
        *REPO.glob("roles/*/handlers/*.yml"),
        *REPO.glob("roles/*/defaults/*.yml"),
        *REPO.glob("playbooks/*.yml"),
        *REPO.glob("provisioner/*.py"),
    ]:
        if path.parts[-3:-1] == ("gpu_stack", "defaults"):
            continue  # generated from the stack data
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if VERSION_LITERAL.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert hits == []


def test_changing_the_stack_data_alone_moves_every_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acceptance test of the one-source redesign: new driver/cuDNN/NCCL/torch versions in
    default-stack.yml, nothing else edited; every generated default, spec and table follows."""
    data = tmp_path / "data"
    shutil.copytree(stk.DATA_DIR, data)
    default = yaml.safe_load((data / "default-stack.yml").read_text())
    default["driver"]["branch"] = "550"
    default["cudnn"]["version"] = "8.9.3.28"
    default["nccl"]["version"] = "2.18.1"
    default["pytorch"]["version"] = "2.4.1"
    (data / "default-stack.yml").write_text(yaml.safe_dump(default, sort_keys=False))
    monkeypatch.setattr(stk, "DEFAULT_STACK", data / "default-stack.yml")
    monkeypatch.setattr(stk, "MATRIX", data / "matrix.yml")
    rendered = rolegen.render()
    defaults = yaml.safe_load(rendered[rolegen.ROLES / "gpu_stack" / "defaults" / "main.yml"])
    assert defaults["gpu_stack_driver_branch"] == "550"
    assert defaults["gpu_stack_cudnn_version"] == "8.9.3.28"
    assert defaults["gpu_stack_nccl_version"] == "2.18.1"
    assert defaults["gpu_stack_pytorch_version"] == "2.4.1"
    assert defaults["gpu_stack_pytorch_python_range"] == ["3.8", "3.12"]  # from the matrix row
    readme = rendered[rolegen.ROLES / "gpu_stack" / "README.md"]
    assert "`gpu_stack_driver_branch` | str | `550`" in readme
    spec = yaml.safe_load(rendered[rolegen.ROLES / "gpu_stack" / "meta" / "argument_specs.yml"])
    assert (
        spec["argument_specs"]["main"]["options"]["gpu_stack_nccl_version"]["default"] == "2.18.1"
    )
    # no other generated file carries a stack version of its own
    for path, text in rendered.items():
        if rolegen.ROLES in path.parents and path.parts[-3] != "gpu_stack":
            assert "2.18.3" not in text and "8.9.2.26" not in text, path


def test_readme_intro_comes_from_the_schema_and_hand_sections_stay() -> None:
    """A role README opens with the schema's short and long description (ansible-doc markup made
    Markdown) and the role's check prefix; what a maintainer wrote after it is kept."""
    spec = {"short": "Does C(x).", "description": ["Long I(y) text."]}
    table = rolegen.readme_table({})
    current = (
        "# nvidia_driver\n\n"
        f"{rolegen.INTRO_BEGIN}\nstale\n{rolegen.INTRO_END}\n\n## Notes\n\nhand text\n\n"
        f"## Variables\n\n{rolegen.BEGIN}\nold\n{rolegen.END}\n\n## More\n\nkept\n"
    )
    out = rolegen.readme_text(current, "nvidia_driver", spec, table)
    assert "stale" not in out and "old\n" not in out
    assert "Does `x`." in out and "Long `y` text." in out
    assert "`provision checks driver`" in out
    assert out.index("## Notes") > out.index(rolegen.INTRO_END)
    assert "hand text" in out and out.endswith("## More\n\nkept\n")
    # a README without markers gets the intro under its title
    bare = rolegen.readme_text("# cuda_library\n\n## Variables\n\n", "cuda_library", spec, table)
    assert bare.startswith("# cuda_library\n\n" + rolegen.INTRO_BEGIN)
    assert "provision checks" not in bare  # cuda_library has no checks of its own
    assert rolegen.BEGIN in bare


def test_the_generator_is_beside_the_product_not_in_it() -> None:
    """No import circle and no generator at run time: the wheel's package has no rolegen, and
    neither the CLI nor a run-path module imports tools/ (the schema comes from rolevars)."""
    assert not (REPO / "provisioner" / "rolegen.py").exists()
    assert (REPO / "tools" / "rolegen.py").is_file()
    hits = [
        str(p.relative_to(REPO))
        for p in REPO.glob("provisioner/**/*.py")
        if re.search(r"^\s*(from tools\b|import tools\b|from provisioner import rolegen)",
                     p.read_text(encoding="utf-8"), re.M)
    ]
    assert hits == []
    code = (
        "import sys\n"
        "import provisioner.cli, provisioner.session, provisioner.stack, provisioner.runner\n"
        "from provisioner import stack\n"
        "stack.policy_vars(); stack.load(None).to_extravars()\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m == 'tools' or m.startswith(('tools.', 'provisioner.rolegen'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO / "tests")
    assert out.stdout.strip().splitlines()[-1] == "[]"
