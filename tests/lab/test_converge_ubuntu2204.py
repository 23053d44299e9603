"""The converge scenario (tests/lab/converge.py) on the Ubuntu 22.04 personality, on branch 580:
NVIDIA's ubuntu2204 repository model (NVIDIA's own 580 builds with Canonical's exact-version
dependencies; nvidia-compute-utils-580 depends on the unversioned nvidia-persistenced; the
unversioned nvidia-fabricmanager / libnvidia-nscq / nvidia-persistenced exist at 590.48.01 too,
so an unpinned name installs 590's beside the 580 driver: NVIDIA/gpu-driver-container#735).
The branch change goes down to 550 (branch-named fabric manager, Canonical-style daemon)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from converge import GUIDE, Personality, Scenario, run_all

OLD, NEW = "580.65.06", "580.95.05"
FAKE_TORCH = """
import zipfile
files = {
    "torch/__init__.py": "__version__ = '2.0.0'\\nfrom . import version, cuda\\n",
    "torch/version.py": "cuda = None\\n",
    "torch/cuda.py": "def is_available():\\n    return False\\n",
    "torch-2.0.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: torch\\nVersion: 2.0.0\\n",
    "torch-2.0.0.dist-info/WHEEL": (
        "Wheel-Version: 1.0\\nGenerator: lab\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    ),
}
record = "".join(f"{n},,\\n" for n in files) + "torch-2.0.0.dist-info/RECORD,,\\n"
with zipfile.ZipFile("/root/torch-2.0.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr("torch-2.0.0.dist-info/RECORD", record)
"""
DRIFT = f"""
set -e
export DEBIAN_FRONTEND=noninteractive
# a hold removed by hand
apt-mark unhold libnccl2
# cuDNN downgraded (held again, so only the version drifts)
apt-mark unhold libcudnn8 libcudnn8-dev
apt-get install -y -q --allow-downgrades \\
  libcudnn8=8.9.0.131-1+cuda12.1 libcudnn8-dev=8.9.0.131-1+cuda12.1
apt-mark hold libcudnn8 libcudnn8-dev
# the profile script edited by hand, and the classic guide's profile script
echo 'export PATH=/usr/local/cuda-11.3/bin:$PATH' >> /etc/profile.d/cuda.sh
cat > /etc/profile.d/zz-cuda-guide.sh <<'GUIDE_END'
{GUIDE}GUIDE_END
# /usr/local/cuda repointed to a second toolkit
apt-get install -y -q cuda-toolkit-12-4
update-alternatives --set cuda /usr/local/cuda-12.4
# the driver userspace upgraded under the loaded module (the pin edited, the holds lifted)
sed -i 's/^Pin: version .*/Pin: version {NEW}-*/' /etc/apt/preferences.d/provision-nvidia-driver
apt-mark unhold $(apt-mark showhold | grep -e nvidia -e cuda-drivers -e libxnvctrl0)
apt-get install -y -q cuda-drivers-580 nvidia-driver-580
# a different torch in the venv (a minimal wheel that says 2.0.0)
/opt/pytorch/bin/python - <<'TORCH_END'
{FAKE_TORCH}
TORCH_END
/opt/pytorch/bin/python -m pip install -q --no-index --no-deps /root/torch-2.0.0-py3-none-any.whl
rm -f /root/torch-2.0.0-py3-none-any.whl
"""

UBUNTU = Personality(
    name="ubuntu2204",
    old=OLD,
    new=NEW,
    other_version="550.54.15",
    torch=True,
    drift_script=DRIFT,
    expected_drift={
        "nccl.hold": ("drift", "libnccl2"),
        "cudnn.version": ("drift", "8.9.0.131"),
        "env.path": ("drift", "edited"),
        "env.foreign_paths": ("drift", "cuda-11.3"),
        "env.ld_library_path": ("drift", "/usr/local/cuda-11.3/lib64"),
        "cuda.symlink": ("drift", "/usr/local/cuda-12.4"),
        "pytorch.version": ("drift", "torch 2.0.0"),
        "driver.version": ("drift", NEW),
        "driver.pin": ("drift", "edited"),
        "driver.module_loaded": ("fail", "mismatch"),
    },
    held_after_converge=("cuda-drivers-580", "nvidia-driver-580", "nvidia-compute-utils-580",
                         "libnvidia-compute-580", "nvidia-firmware-580", "libnvidia-gpucomp-580",
                         "nvidia-persistenced", "nvidia-modprobe", "nvidia-fabricmanager",
                         "libnvidia-nscq", "libcudnn8", "libcudnn8-dev", "libnccl2",
                         "libnccl-dev"),
    # cuda/cuda-12-1/cuda-drivers float to newer releases; the unversioned names' 590 builds are
    # caught by the scenario's check that nothing is at another driver version
    never_installed=("cuda", "cuda-12-1", "cuda-drivers"),
    driver_package="nvidia-driver-580",
    branch="580",
    other_branch="550",
)


def test_converge_scenario_on_ubuntu2204(lab: Any, tmp_path: Path) -> None:
    fleet = lab.create_fleet(1, ["h100-sxm-8"], personality="ubuntu2204")
    try:
        run_all(Scenario(UBUNTU, fleet, tmp_path))
    finally:
        fleet.destroy()
