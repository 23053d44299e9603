# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Every check id provision reports: what it verifies and how to fix it (`provision checks`).

The one catalogue: the evaluator's ids (plugins/module_utils/evaluate.py), the host lock's, the
validation program's (validation.*) and the ones the CLI adds itself (ssh.*, <role>.task,
<role>.pending). A unit test fails when the evaluator can produce an id that is not here.
"""

from __future__ import absolute_import, annotations, division, print_function

CATALOG = {
    "preflight.arch": {
        "verifies": "the CPU architecture is x86_64 or aarch64 (NVIDIA's sbsa repositories)",
        "remediation": "use an x86_64 or aarch64 (SBSA) server",
    },
    "preflight.cuda_repo": {
        "verifies": "NVIDIA publishes the stack's CUDA for this OS release "
        "and architecture (or the mirror declares it carries it); "
        "the default stack stops on Debian 12, whose repository "
        "starts at CUDA 12.3",
        "remediation": "use an OS release NVIDIA publishes the CUDA version "
        "for, a stack whose CUDA exists there, or declare "
        "mirrors.nvidia_repo_carries for a mirror that has it",
    },
    "preflight.disk": {
        "verifies": "enough free disk space for the driver, toolkit and PyTorch "
        "(gpu_stack_preflight_min_free_gib at "
        "gpu_stack_preflight_disk_path)",
        "remediation": "free disk space at the checked path",
    },
    "preflight.gpu": {
        "verifies": "at least one NVIDIA GPU is on the PCI bus (lspci) or answers nvidia-smi",
        "remediation": "run the stack only on hosts with NVIDIA GPUs (check --limit "
        "and the inventory)",
    },
    "preflight.kernel_headers": {
        "verifies": "the headers of the running kernel are installed or "
        "installable (DKMS builds the module against them)",
        "remediation": "install the kernel headers package, or boot a "
        "kernel whose headers the mirror carries",
    },
    "preflight.lock": {
        "verifies": "no other provisioning run holds this host (the lock "
        "/var/lib/provision/run.lock names its controller, pid and "
        "start time)",
        "remediation": "wait for that run; a dead run's lock is taken over after "
        "gpu_stack_lock_stale_s without a sign of life, or at once "
        "with -e gpu_stack_lock_takeover=true",
    },
    "preflight.nouveau": {
        "verifies": "the nouveau module is not loaded",
        "remediation": "run `provision` on the host (it blacklists nouveau), then reboot",
    },
    # BEGIN GENERATED SUPPORT (make roles, from provisioner/data/support.yml)
    "preflight.os": {
        "verifies": (
            "the host runs a supported OS release (Ubuntu 20.04/22.04/24.04, Debian"
            " 11/12, RHEL/Rocky/Alma 9; EL8 is refused: ansible-core 2.17+ cannot "
            "manage its packages)"
        ),
        "remediation": "use a supported distribution release",
    },
    # END GENERATED SUPPORT
    "preflight.package_manager": {
        "verifies": "cloud-init finished and no other process holds the "
        "dpkg/rpm locks within gpu_stack_wait_timeout_s "
        "(first boot, unattended-upgrades); names the "
        "holder's pid and name",
        "remediation": "wait for the first-boot work to finish (or "
        "raise gpu_stack_wait_timeout_s), then rerun",
    },
    "preflight.python": {
        "verifies": "the interpreter for the PyTorch venv "
        "(gpu_stack_pytorch_python) is inside the Python range of "
        "the stack's torch wheels",
        "remediation": "install a supported Python (e.g. the deadsnakes "
        "python3.11 on Ubuntu 20.04) and set -e "
        "gpu_stack_pytorch_python=python3.11",
    },
    "preflight.secure_boot": {
        "verifies": "Secure Boot is off, or the driver comes from a signed "
        "module path; checked before anything changes",
        "remediation": "enrol a MOK key at the console or use signed "
        "modules (Ubuntu "
        "linux-modules-nvidia-<branch>-server), or disable "
        "Secure Boot",
    },
    "<role>.pending": {
        "verifies": "in check mode, no task of the role would change the host",
        "remediation": "run `provision` on the host to converge it",
    },
    "<role>.task": {
        "verifies": "a task that is not a check succeeded (an apt/dnf error, an "
        "unreachable mirror)",
        "remediation": "see the task error in the output; rerun with -v for details",
    },
    "cuda.nvcc": {
        "verifies": "nvcc --version reports the stack's CUDA release",
        "remediation": "run `provision` on the host",
    },
    "cuda.symlink": {
        "verifies": "/usr/local/cuda points at the stack's toolkit (update-alternatives)",
        "remediation": "run `provision` on the host",
    },
    "cuda.toolkit": {
        "verifies": "cuda-toolkit-<major>-<minor> of the stack is installed (never "
        "the floating `cuda` or `cuda-<x>-<y>` metas, which pull a "
        "driver)",
        "remediation": "run `provision` on the host",
    },
    "cudnn.hold": {
        "verifies": "the cuDNN packages are held",
        "remediation": "run `provision` on the host",
    },
    "cudnn.version": {
        "verifies": "libcudnn (+ -dev) at the stack's version, built for the stack's CUDA",
        "remediation": "run `provision` on the host",
    },
    "driver.branch": {
        "verifies": "the installed driver is of the stack's branch (driver.branch)",
        "remediation": "run `provision` on the host (installs cuda-drivers-<branch> and holds it)",
    },
    "driver.dcgm": {
        "verifies": "with dcgm.install in the stack: NVIDIA DCGM's package for the stack's CUDA "
        "major (datacenter-gpu-manager-4-cuda<major>) is installed and its host engine "
        "(nvidia-dcgm) is enabled and active once the driver's module is loaded",
        "remediation": "run `provision` on the host (the nvidia_driver role installs it)",
    },
    "driver.fabricmanager": {
        "verifies": "on NVSwitch systems, nvidia-fabricmanager runs at "
        "exactly the driver's version (CUDA error 802 without "
        "it); absent elsewhere",
        "remediation": "run `provision` on the host (driver.fabricmanager "
        "auto|always|never in the stack)",
    },
    "driver.flavor": {
        "verifies": "the open kernel-module flavour is only used where every GPU is "
        "Turing or newer (compute capability >= 7.5)",
        "remediation": "use driver.flavor proprietary on older GPUs",
    },
    "driver.hold": {
        "verifies": "the driver packages are held (apt-mark hold, dnf versionlock) so "
        "upgrades cannot move them",
        "remediation": "run `provision` on the host (it holds them again)",
    },
    "driver.module_loaded": {
        "verifies": "the loaded kernel module matches the installed "
        'userspace driver (no "Driver/library version mismatch", '
        "nvidia-smi exit 18)",
        "remediation": "reboot the host (the module of the new driver loads at boot)",
    },
    "driver.next_boot": {
        "verifies": "the kernel the host boots next (and the running one) has an "
        "NVIDIA module built for it",
        "remediation": "install the headers for the new kernel and run dkms "
        "autoinstall, or run `provision` on the host",
    },
    "driver.nouveau_blacklist": {
        "verifies": "nouveau is blacklisted in /etc/modprobe.d and the initramfs",
        "remediation": "run `provision` on the host, then reboot",
    },
    "driver.persistence": {
        "verifies": "nvidia-persistenced runs with persistence mode on (a "
        "drop-in where the packaged unit runs "
        "--no-persistence-mode, as Ubuntu's) and every GPU reports "
        "Persistence Mode Enabled",
        "remediation": "run `provision` on the host",
    },
    "driver.pin": {
        "verifies": "apt preferences pin every driver package to the stack's branch or "
        "exact version (/etc/apt/preferences.d/provision-nvidia-driver), "
        "so one transaction never mixes versions; beside an adopted Canonical "
        "driver, only the fabric manager, at that driver's version",
        "remediation": "run `provision` on the host",
    },
    "driver.reboot": {
        "verifies": "no reboot is pending for the driver (under --no-reboot a "
        "needed reboot fails this check)",
        "remediation": "reboot the host in your maintenance window, then run "
        "`provision` (or `provision validate`)",
    },
    "driver.secure_boot": {
        "verifies": "the driver modules can load: Secure Boot off, Canonical's "
        "signed modules adopted, or a declared signed path "
        "(gpu_stack_secure_boot_signed)",
        "remediation": "enrol a MOK key at the console or use signed modules, "
        "or disable Secure Boot",
    },
    "driver.version": {
        "verifies": "the installed driver is the stack's version (driver.version), "
        "or the newest of the branch when that is null",
        "remediation": "run `provision` on the host",
    },
    "env.foreign_paths": {
        "verifies": "no login-shell file exports another CUDA toolkit's bin or "
        "lib64 (names the file and line)",
        "remediation": "run `provision` (comments out such lines in "
        "/etc/profile.d and /etc/environment); elsewhere edit "
        "the named file",
    },
    "env.ld_library_path": {
        "verifies": "LD_LIBRARY_PATH holds the toolkit's lib64 and only paths that exist",
        "remediation": "run `provision` on the host",
    },
    "env.ldconfig": {
        "verifies": "ldconfig -p lists the CUDA libraries (ld.so.conf.d entry), the dynamic "
        "linker resolves none of them from another CUDA toolkit's directory, and no "
        "/etc/ld.so.conf.d file lists another CUDA's directory",
        "remediation": "run `provision` (comments out other CUDA directories in "
        "/etc/ld.so.conf.d and runs ldconfig)",
    },
    "env.path": {
        "verifies": "a login shell finds the stack's nvcc first on PATH (/etc/profile.d)",
        "remediation": "run `provision` on the host",
    },
    "env.user_shell_files": {
        "verifies": "no shell file of the named users (gpu_stack_env_users: ~/.bashrc, "
        "~/.profile, ...) exports another CUDA toolkit's bin or lib64 (names the file and line)",
        "remediation": "edit the named file and line (provision never edits a user's dotfiles)",
    },
    "nccl.hold": {
        "verifies": "the NCCL packages are held",
        "remediation": "run `provision` on the host",
    },
    "nccl.version": {
        "verifies": "libnccl2 and libnccl-dev at the stack's version, built for the stack's CUDA",
        "remediation": "run `provision` on the host",
    },
    "pytorch.cuda": {
        "verifies": "inside the venv, torch.version.cuda is the stack's CUDA and "
        "CUDA, NCCL and cuDNN work (CPU builds report none)",
        "remediation": "run `provision` on the host; a driver too old for the CUDA "
        "build shows here",
    },
    "pytorch.hashes": {
        "verifies": "the torch wheels are verified by sha256: from an index (pip checks the hashes "
        "its links carry) or, with a find-links mirror, from mirrors.pytorch_hashes (pip "
        "--require-hashes); without either nothing is installed",
        "remediation": "list the wheels' pins and sha256 in mirrors.pytorch_hashes "
        "(pip-compile --generate-hashes), or use an index",
    },
    "pytorch.version": {
        "verifies": "the venv holds the stack's torch (and torchvision/torchaudio "
        "when given) from the stack's index",
        "remediation": "run `provision` on the host",
    },
    "repo.contrib": {
        "verifies": "Debian only: Debian's archive entries include contrib, which "
        "NVIDIA's Debian driver packages depend on",
        "remediation": "run `provision` on the host (it adds contrib)",
    },
    "repo.driver_build": {
        "verifies": "Debian: NVIDIA's repository carries nvidia-driver-cuda at the stack's "
        "branch (or exact version), asked with apt-cache policy after the repository is set up",
        "remediation": "choose a driver branch or version the repository carries",
    },
    "repo.key": {
        "verifies": "Debian family: the keyring apt checks NVIDIA's repository with "
        "(/usr/share/keyrings/cuda-archive-keyring.gpg, from cuda-keyring) holds one of "
        "gpu_stack_repo_key_fingerprints (NVIDIA's key 3bf863cc by default); a keyring from a "
        "mirror that is not NVIDIA's stops the run before any package comes from it",
        "remediation": "compare the keyring with NVIDIA's key (gpg --show-keys); for a mirror "
        "re-signed with a site key, add that key's fingerprint to gpu_stack_repo_key_fingerprints",
    },
    "repo.package_state": {
        "verifies": "Debian family: dpkg's last run finished (no journal left, no half-configured "
        "package): an install cut short by a lost connection, Ctrl-C or a reboot blocks apt",
        "remediation": "run `provision` on the host (dpkg --configure -a, then apt-get "
        "--fix-broken install)",
    },
    "repo.source": {
        "verifies": "exactly one sources entry (or .repo) for NVIDIA's repository, "
        "and it carries the stack's CUDA toolkit",
        "remediation": "run `provision` on the host; on a mirror, declare "
        "mirrors.nvidia_repo_carries or add the packages",
    },
    "ssh.auth": {
        "verifies": "the SSH user authenticates (key, agent)",
        "remediation": "check --user/--key, the ssh agent, and authorized_keys",
    },
    "ssh.cloud_init": {
        "verifies": "with --wait: cloud-init finished on the host (`cloud-init status "
        "--wait`) without errors, within the bound",
        "remediation": "look at `cloud-init status --long` and "
        "/var/log/cloud-init-output.log on the host; give a longer --wait if it is "
        "only slow",
    },
    "ssh.connect": {
        "verifies": "TCP connects to the SSH port and an SSH handshake completes "
        "(banner and key exchange); with --wait, within the bound",
        "remediation": "check that the host is up and sshd listens on the port (a "
        "hung or overloaded sshd, or a port that is not SSH, shows "
        "here)",
    },
    "ssh.exec": {
        "verifies": "the probe command runs over the SSH session",
        "remediation": "check the host's shell and sshd's session limits (MaxSessions), then rerun",
    },
    "ssh.hostkey": {
        "verifies": "the host key is in known_hosts, unchanged and not @revoked",
        "remediation": "verify the fingerprint, then --accept-new-host-keys (unknown "
        "keys only); a changed or revoked key needs a person",
    },
    "ssh.resolve": {
        "verifies": "the host name resolves",
        "remediation": "check the host name (DNS or /etc/hosts)",
    },
    "ssh.sudo": {
        "verifies": "sudo -n works for the SSH user (unless --no-become or -K)",
        "remediation": "configure passwordless sudo or use --ask-become-pass",
    },
    "ssh.timeout": {
        "verifies": "the probe answered within its overall time limit",
        "remediation": "check the host's load and network; rerun, or use --no-preflight",
    },
    # the deep health tier (components/health_deep.py declares them; a unit test keeps them equal)
    "health.dcgm": {
        "verifies": "NVIDIA DCGM (dcgmi) is installed, so the deep health tier can run",
        "remediation": "set dcgm.install: true in the stack and run provision (the nvidia_driver "
        "role installs datacenter-gpu-manager-4-cuda<CUDA major> from NVIDIA's CUDA repository), "
        "or install it yourself",
        "action": "none",
    },
    "health.dcgm_diag": {
        "verifies": "`dcgmi diag -r N` (N = dcgm.diag_level) finished within "
        "dcgm.diag_timeout_s and every test passed on every GPU; skipped tests and "
        "passes with an error behind them do not pass",
        "remediation": "read DCGM's message per GPU; drain the node, act as the finding "
        "says, rerun `provision check --deep`",
        "action": "reset_gpu",
    },
    "validation.allreduce": {
        "verifies": "an all-reduce sweep returns correct sums and its bus "
        "bandwidth meets the threshold for the GPU model and "
        "topology (thresholds.yml)",
        "remediation": "check the interconnect: nvidia-smi topo -m, "
        "nvidia-smi nvlink -s, fabric manager on NVSwitch "
        "systems, PCIe link width/speed (lspci -vv), "
        "NCCL_DEBUG=INFO for the transport",
    },
    "validation.ddp": {
        "verifies": "a DDP training job's loss falls, parameters stay "
        "bit-identical on all ranks, no rank is a straggler and the "
        "scaling efficiency meets the threshold",
        "remediation": "look at the named rank's GPU (nvidia-smi -q clocks and "
        "throttle reasons, ECC/XID in dmesg) and host load; "
        "diverging parameters mean a rank computes wrong results - "
        "drain the node",
    },
    "validation.multinode": {
        "verifies": "all-reduce and DDP across all hosts of the play, over the network",
        "remediation": "check the network between the hosts "
        "(gpu_stack_validation_network_interface, firewall on "
        "validation_master_port, the first host's address; "
        "NCCL_DEBUG=INFO)",
    },
}

# The components in the new shape (components/*.py) declare their checks: derived, not copied.
from ansible_collections.provision.gpu.plugins.module_utils.components import (
    REGISTRY as _REGISTRY,
)

for _module in _REGISTRY.values():
    for _spec in _module.CHECKS:
        CATALOG[_spec.id] = _spec.entry()
