"""The lab's .so cache is shared by concurrent builders (pytest-xdist workers on a cold cache)."""

from __future__ import annotations

import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from lab.debs import shared_object


def _build(cache: str) -> bytes:
    return shared_object(Path(cache), "libnvidia-ml.so.1", "nvml_version", "535.129.03")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (.ci/run installs it)")
def test_concurrent_builders_of_one_object_all_succeed_and_leave_only_it(tmp_path: Path) -> None:
    with ProcessPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(_build, [str(tmp_path)] * 8))
    assert len(set(outs)) == 1 and outs[0][:4] == b"\x7fELF"
    assert b"libnvidia-ml.so.1" in outs[0]  # the soname
    assert [p.suffix for p in tmp_path.iterdir()] == [".so"], sorted(tmp_path.iterdir())
