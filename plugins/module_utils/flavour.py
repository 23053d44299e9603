# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Which kernel module flavour (open or proprietary) a package builds or ships, and which one is
loaded: the names the driver.flavor check reads (components/driver.py)."""

from __future__ import absolute_import, annotations, division, print_function

import re

__metaclass__ = type

OPEN_MODULE_RE = re.compile(
    r"^(nvidia-dkms-\d+(-server)?-open|nvidia-kernel-open-\d+|"
    r"nvidia-kernel-source-\d+(-server)?-open|linux-modules-nvidia-\d+(-server)?-open-\d.*|"
    r"nvidia-kernel-open-dkms|kmod-nvidia-open-dkms)$"
)

PROPRIETARY_MODULE_RE = re.compile(
    r"^(nvidia-dkms-\d+(-server)?|nvidia-kernel-source-\d+(-server)?|"
    r"linux-modules-nvidia-\d+(-server)?-\d.*|nvidia-kernel-dkms|kmod-nvidia-latest-dkms)$"
)


def kernel_module_flavour(name: str) -> str:
    """Which kernel module flavour a package builds or ships: open, proprietary or "" (U1: the
    -open packages of Canonical's control; D1, R1/R3: Debian's and EL's module package names)."""
    if OPEN_MODULE_RE.match(name):
        return "open"
    if PROPRIETARY_MODULE_RE.match(name):
        return "proprietary"
    return ""


def loaded_module_flavour(version_file: str) -> str:
    """/proc/driver/nvidia/version -> open ("NVIDIA UNIX Open Kernel Module for x86_64"),
    proprietary ("NVIDIA UNIX x86_64 Kernel Module"), or "" when no module is loaded."""
    if "Open Kernel Module" in version_file:
        return "open"
    if "Kernel Module" in version_file:
        return "proprietary"
    return ""
