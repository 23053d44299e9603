"""The simulated GPU lab: booted systemd-nspawn hosts, a fake NVIDIA repo, a loopback wheelhouse.

    lab = Lab()                       # $PROVISION_LAB_DIR or /var/tmp/provision-lab
    lab.ensure_base()                 # Debian 12 rootfs (cached by recipe hash)
    lab.start_repo()                  # signed fake NVIDIA repo + wheelhouse on 127.0.0.1:<port>
    fleet = lab.create_fleet(2, profiles=["h100-sxm-8", "nogpu"])
    fleet.run("gpu01", "nvidia-smi -L")
    fleet.destroy(); lab.stop_repo()

See provisioner/lab/README.md.
"""

from __future__ import annotations

from lab.fleet import Fleet
from lab.hosts import Host, RunResult
from lab.lab import Lab, unavailable_reason
from lab.util import LabError, LabUnavailable

__all__ = ["Fleet", "Host", "Lab", "LabError", "LabUnavailable", "RunResult", "unavailable_reason"]
