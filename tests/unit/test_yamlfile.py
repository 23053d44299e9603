"""Shipped data files are read with libyaml's loader (yamlfile.load_packaged) for speed; they must
still pass the strict loader that user files get (no anchors, aliases or duplicate keys), and both
readings must agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import yamlfile

DATA = Path(__file__).resolve().parents[2] / "provisioner" / "data"
FILES = sorted(DATA.glob("*.yml"))


def test_there_are_shipped_data_files() -> None:
    assert {p.name for p in FILES} >= {"matrix.yml", "support.yml", "role-variables.yml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_shipped_data_file_passes_the_strict_loader_and_reads_the_same(path: Path) -> None:
    strict = yamlfile.load(path, limit=8 * yamlfile.MiB, what="data file")
    assert yamlfile.load_packaged(path) == strict


def test_the_strict_loader_refuses_what_the_fast_one_would_accept(tmp_path: Path) -> None:
    f = tmp_path / "d.yml"
    f.write_text("a: 1\na: 2\n", encoding="utf-8")
    assert yamlfile.load_packaged(f) == {"a": 2}
    with pytest.raises(yamlfile.YamlFileError, match="duplicate key 'a'"):
        yamlfile.load(f, limit=1024, what="data file")


def test_a_broken_packaged_file_names_itself(tmp_path: Path) -> None:
    f = tmp_path / "broken.yml"
    f.write_text("a: [1,\n", encoding="utf-8")
    with pytest.raises(yamlfile.YamlFileError, match=r"broken\.yml: not valid YAML"):
        yamlfile.load_packaged(f)
