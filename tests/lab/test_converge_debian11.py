"""The converge scenario (tests/lab/converge.py) on the Debian 11 personality: a real bullseye root
file system with NVIDIA's debian11 repository model (Debian-style names nvidia-driver-cuda,
nvidia-kernel-dkms, libcuda1, versions <V>-1, siblings at exact versions, contrib needed; a real
nvidia-persistenced whose unit has [Install] and persistence on). No CPU torch wheel for Python 3.9
is reachable here, so the pytorch and validation roles are skipped on this personality (they are
OS-independent and run on the Ubuntu one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from converge import GUIDE, Personality, Scenario, run_all

OLD, NEW = "535.54.03", "535.104.05"
DRIFT = f"""
set -e
export DEBIAN_FRONTEND=noninteractive
# a hold removed by hand
apt-mark unhold libnccl2
# the profile script edited by hand, and the classic guide's profile script
echo 'export PATH=/usr/local/cuda-11.3/bin:$PATH' >> /etc/profile.d/cuda.sh
cat > /etc/profile.d/zz-cuda-guide.sh <<'GUIDE_END'
{GUIDE}GUIDE_END
# /usr/local/cuda taken away
update-alternatives --remove cuda /usr/local/cuda-12.1
# the driver userspace upgraded under the loaded module (the pin edited, the holds lifted)
sed -i 's/^Pin: version .*/Pin: version {NEW}-*/' /etc/apt/preferences.d/provision-nvidia-driver
apt-mark unhold $(apt-mark showhold | grep -v -e libcudnn -e libnccl)
apt-get install -y -q nvidia-driver-cuda nvidia-kernel-dkms nvidia-persistenced
"""

DEBIAN11 = Personality(
    name="debian11",
    old=OLD,
    new=NEW,
    other_version="550.54.14",
    torch=False,
    drift_script=DRIFT,
    expected_drift={
        "nccl.hold": ("drift", "libnccl2"),
        "env.path": ("drift", "edited"),
        "env.foreign_paths": ("drift", "cuda-11.3"),
        "env.ld_library_path": ("drift", "/usr/local/cuda-11.3/lib64"),
        "cuda.symlink": ("drift", "missing"),
        "driver.version": ("drift", NEW),
        "driver.pin": ("drift", "edited"),
        "driver.module_loaded": ("fail", "mismatch"),
    },
    held_after_converge=("nvidia-driver-cuda", "nvidia-kernel-dkms", "libcuda1",
                         "nvidia-persistenced", "nvidia-fabricmanager-535", "libcudnn8",
                         "libcudnn8-dev", "libnccl2", "libnccl-dev"),
    # Ubuntu's branch-suffixed names do not exist here; cuda/cuda-12-1/cuda-drivers float
    never_installed=("nvidia-driver-535", "cuda", "cuda-12-1", "cuda-drivers"),
    driver_package="nvidia-driver-cuda",
)


def test_converge_scenario_on_debian11(lab: Any, tmp_path: Path) -> None:
    fleet = lab.create_fleet(1, ["h100-sxm-8"], personality="debian11")
    try:
        run_all(Scenario(DEBIAN11, fleet, tmp_path))
    finally:
        fleet.destroy()
