# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The health tier's numbers and tables, as data, each with its public source (issue 19).

Pure data (Python 3.8+ on targets). Actions are from components/base.ACTIONS.
"""

from __future__ import absolute_import, annotations, division, print_function

# Xid -> (severity, action, what it means). Source: NVIDIA's Xid catalogue
# (docs.nvidia.com/deploy/xid-errors/, "Xid Errors" r590 table: description and recommended
# action per Xid) and the AWS GPU cluster health check suite's Xid-to-action table built from it
# (aws-samples/awsome-distributed-training:
# 4.validation_and_observability/2.gpu-cluster-healthcheck/README.md: ISOLATE/REBOOT/RESET/MONITOR).
# Confidence: medium (the catalogue's action wording differs per driver release; the ladder here
# keeps the most disruptive action either source names). Xids not listed here are reported with
# action "monitor" and the note that they are not in this table.
XID_CATALOG = {
    13: ("warning", "monitor", "graphics engine exception (usually the application)"),
    31: ("warning", "monitor", "GPU memory page fault (usually the application)"),
    43: ("warning", "monitor", "GPU stopped processing (usually the application)"),
    45: ("info", "monitor", "preemptive cleanup after an earlier error"),
    48: ("critical", "reset_gpu", "double bit ECC error (uncorrectable memory error)"),
    61: ("critical", "reset_gpu", "internal micro-controller breakpoint/warning"),
    62: ("critical", "reset_gpu", "internal micro-controller halt"),
    63: ("warning", "monitor", "ECC page retirement or row remapping recorded"),
    64: ("critical", "service", "ECC page retirement or row remapping recording failed"),
    74: ("critical", "reset_gpu", "NVLink error"),
    79: ("critical", "reboot", "GPU has fallen off the bus"),
    92: ("warning", "monitor", "high single-bit ECC error rate"),
    94: ("critical", "reset_gpu", "contained ECC error"),
    95: ("critical", "reset_gpu", "uncontained ECC error"),
    109: ("warning", "monitor", "context switch timeout"),
    119: ("critical", "reset_gpu", "GSP RPC timeout"),
    120: ("critical", "reset_gpu", "GSP error"),
    140: ("critical", "reset_gpu", "unrecovered ECC error"),
}

THRESHOLDS = {
    # any uncorrectable volatile ECC error since the last reset: the memory is suspect until the
    # GPU is reset (NVIDIA GPU memory error management, docs.nvidia.com/deploy/
    # a100-gpu-mem-error-mgmt/; Google Cluster Toolkit's Slurm prolog drains on any uncorrected
    # volatile ECC error: GoogleCloudPlatform/cluster-health-scanner:README.md). Confidence: high.
    "ecc_volatile_uncorrectable_max": 0,
    # aggregate (lifetime) uncorrectable errors with none volatile: already handled by a remap or
    # a retirement; watch it. Confidence: medium.
    "ecc_aggregate_uncorrectable_max": 0,
    # NVLink CRC/replay/recovery error counters: facebookresearch/gcm health checks default 0
    # (gcm/health_checks/checks/check_nvidia_smi.py nvlink thresholds). Confidence: medium.
    "nvlink_error_counter_max": 0,
}

# Actions per finding kind (the ladder of components/base.ACTIONS). Sources: remap pending needs a
# GPU reset and a remap failure needs service (NVIDIA GPU memory error management, "Row
# Remapping": docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/); a GPU gone from nvidia-smi is Xid
# 79's action (reboot; service when it recurs); the rest as NVIDIA Health Validation's action
# ladder (docs.nvidia.com/health-validation/reference/verdict-schema).
ACTION = {
    "gpu_missing": "reboot",
    "ecc_volatile": "reset_gpu",
    "ecc_aggregate": "monitor",
    "remap_pending": "reset_gpu",
    "remap_failure": "service",
    "retired_pending": "reset_gpu",
    "pcie_width": "drain",
    "throttle_hw": "drain",
    "throttle_sw_thermal": "monitor",
    "nvlink_inactive": "reset_gpu",
    "nvlink_errors": "monitor",
    "fabric": "drain",
    "driver_mismatch": "reboot",
    "driver_next_boot": "drain",
}
