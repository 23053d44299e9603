"""The test tree: pytest imports test modules by base name (no packages), so two test files with
one name in tests/unit and tests/lab cannot both be collected ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique_across_unit_and_lab() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts)
    assert [n for n, c in names.items() if c > 1] == []


# The research notes beside the checkout are not part of the project: a maintainer who clones it
# does not have them, so no tracked file may cite them (cite the public source they name).
NOTES = ("health-anchors", "nvidia-facts", "performance-anchors", "prior-art", "real-repos",
         "style-anchors", "test-lab")


def test_no_tracked_file_cites_the_private_research_notes() -> None:
    import subprocess  # noqa: PLC0415

    repo = TESTS.parent
    files = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True,
                           check=True).stdout.split()
    me = Path(__file__).resolve()
    hits = []
    for name in files:
        path = repo / name
        if path.resolve() == me or not path.is_file() or path.suffix in (".png", ".gz"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{name}: {n}.md" for n in NOTES if f"{n}.md" in text]
        if "shared/reference" in text:
            hits.append(f"{name}: shared/reference")
    assert hits == []


def test_no_product_source_file_is_over_800_lines() -> None:
    """Issue 18: each component one module; no product file grows back into a 1,600-line judge."""
    repo = TESTS.parent
    product = [*repo.glob("provisioner/**/*.py"), *repo.glob("plugins/**/*.py"),
               *repo.glob("roles/*/files/**/*.py")]
    assert len(product) > 40
    long = {str(p.relative_to(repo)): n for p in product
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800}
    assert long == {}
