# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The validation component: NCCL all-reduce bandwidth and DDP training across the GPUs and hosts
(role validation). Its checks are judged by the validation program on the host
(roles/validation/files/provision_validate/checks.py), not by the probe: this module declares
them.
"""

from __future__ import absolute_import, annotations, division, print_function

from ansible_collections.provision.gpu.plugins.module_utils.components.base import CheckSpec

NAMES = ("validation",)
ROLE = "validation"

CHECKS = (
    CheckSpec(
        "validation.allreduce",
        (
            "an all-reduce sweep returns correct sums and its bus bandwidth meets the "
            "threshold for the GPU model and topology (thresholds.yml)"
        ),
        (
            "check the interconnect: nvidia-smi topo -m, nvidia-smi nvlink -s, fabric "
            "manager on NVSwitch systems, PCIe link width/speed (lspci -vv), "
            "NCCL_DEBUG=INFO for the transport"
        ),
    ),
    CheckSpec(
        "validation.ddp",
        (
            "a DDP training job's loss falls, parameters stay bit-identical on all ranks,"
            " no rank is a straggler and the scaling efficiency meets the threshold"
        ),
        (
            "look at the named rank's GPU (nvidia-smi -q clocks and throttle reasons, "
            "ECC/XID in dmesg) and host load; diverging parameters mean a rank computes "
            "wrong results - drain the node"
        ),
    ),
    CheckSpec(
        "validation.multinode",
        "all-reduce and DDP across all hosts of the play, over the network",
        (
            "check the network between the hosts (gpu_stack_validation_network_interface,"
            " firewall on validation_master_port, the first host's address; "
            "NCCL_DEBUG=INFO)"
        ),
    ),
)
