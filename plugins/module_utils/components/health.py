# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""GPU health, quick tier (issue 19): read-only, passive, judged from the one probe's facts.

Reads the `gpu` and `health` sections of collect.py (nvidia-smi -q, the kernel log's NVRM Xid
lines, /proc/driver/nvidia/version, nvidia-smi nvlink -s/-e on NVLink systems) plus `kernel` and
`units`. Every finding names the GPU (index, bus id, UUID), the figure, the threshold and an action
from base.ACTIONS. A finding whose action is above "monitor" fails the check (exit 1, never drift:
health is not a difference from the stack). A deep tier (DCGM, `provision check --deep`) adds its
own check ids and fact section in its own component and reports through the same records.

Pure Python, no I/O (Python 3.8+ on targets).
"""

from __future__ import absolute_import, annotations, division, print_function

from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils import health_data as data
from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    ACTIONS,
    CheckSpec,
    Context,
)
from ansible_collections.provision.gpu.plugins.module_utils.health_parsers import normalise_bus

NAME = "health"
ROLE = ""
SECTIONS = ("gpu", "health", "kernel", "units")

CHECKS = (
    CheckSpec(
        "health.gpu_count",
        "the GPUs on the PCI bus (lspci), the GPUs nvidia-smi sees and the expected count "
        "(gpu_stack_health_expected_gpus, else the last passing report) agree; names the "
        "missing bus id",
        "reboot the host; a GPU that stays off the bus needs service (reseat, RMA)",
        "reboot",
    ),
    CheckSpec(
        "health.xid",
        "no NVRM Xid line since boot whose action in NVIDIA's Xid catalogue is above monitor "
        "(Xid 48, 79, 94, 95, 119, ...); each Xid is reported with its severity and action",
        "follow the action named per Xid (reset the GPU, reboot, or service); application "
        "Xids (13, 31, 43) are reported for monitoring only",
        "service",
    ),
    CheckSpec(
        "health.ecc",
        "no uncorrectable volatile ECC error since the last GPU reset (aggregate ones are "
        "reported for monitoring); on pre-Ampere GPUs no page retirement pending",
        "drain the node and reset the GPU (nvidia-smi -r when idle) or reboot",
        "reset_gpu",
    ),
    CheckSpec(
        "health.row_remap",
        "no row remap pending (it needs a GPU reset to take effect) and no remap failure",
        "pending: drain and reset the GPU; failure: the GPU needs service (RMA)",
        "service",
    ),
    CheckSpec(
        "health.pcie_link",
        "each GPU's current PCIe link width equals its maximum (the generation drops at idle "
        "by design and is not judged)",
        "drain the node and reseat the GPU or riser; check the slot in the BIOS",
        "drain",
    ),
    CheckSpec(
        "health.throttle",
        "no clock event reason that matters is active: HW slowdown, HW thermal or power brake "
        "slowdown (drain), SW thermal slowdown (monitor); idle and application clocks ignored",
        "check cooling, fans, power supplies and the BMC's event log; drain until it clears",
        "drain",
    ),
    CheckSpec(
        "health.nvlink",
        "on NVLink systems no GPU has inactive links or all links down, and the CRC, replay "
        "and recovery error counters (nvidia-smi nvlink -e) are zero",
        "inactive links: drain and reset the GPUs (or reboot); growing counters: monitor, "
        "service the baseboard when they keep rising",
        "reset_gpu",
    ),
    CheckSpec(
        "health.fabric",
        "on NVSwitch systems nvidia-fabricmanager is active and every GPU's fabric state is "
        "Completed with status Success",
        "start nvidia-fabricmanager (its version must equal the driver's) and reset the GPUs "
        "or reboot; drain until the fabric is complete",
        "drain",
    ),
    CheckSpec(
        "health.driver_coherence",
        "the loaded kernel module (/proc/driver/nvidia/version), the userspace nvidia-smi uses "
        "and the module installed for the kernel that boots next are one driver",
        "reboot to load the installed driver; if the next kernel has no module, run "
        "`provision` (it builds or installs it) before rebooting",
        "reboot",
    ),
)


def _rank(action: str) -> int:
    return ACTIONS.index(action) if action in ACTIONS else 0


def _gpu_ref(g: dict[str, Any]) -> dict[str, Any]:
    return {"index": g.get("index"), "bus_id": g.get("bus_id"), "uuid": g.get("uuid")}


def _name(ref: dict[str, Any]) -> str:
    if ref.get("index") is None:
        return "GPU at %s" % ref.get("bus_id")
    return "GPU %s (%s, %s)" % (ref.get("index"), ref.get("bus_id"), ref.get("uuid"))


def _finding(
    gpu: dict[str, Any], figure: str, threshold: str, action: str, message: str
) -> dict[str, Any]:
    return {
        "gpu": gpu,
        "figure": figure,
        "threshold": threshold,
        "action": action,
        "message": message,
    }


def _report(
    ctx: Context,
    cid: str,
    findings: list[dict[str, Any]],
    ok: str,
    expected: str,
    status: str = "",
) -> None:
    spec = next(c for c in CHECKS if c.id == cid)
    if not findings:
        ctx.add(cid, "pass", expected, ok, ok, action="none", findings=[])
        return
    action = max((f["action"] for f in findings), key=_rank)
    status = status or ("pass" if _rank(action) <= _rank("monitor") else "fail")
    message = "; ".join(f["message"] for f in findings[:8])
    if len(findings) > 8:
        message += "; and %d more" % (len(findings) - 8)
    ctx.add(
        cid,
        status,
        expected,
        "; ".join(f["figure"] for f in findings[:8]),
        "%s (action: %s)" % (message, action),
        remediation=spec.remediation,
        action=action,
        findings=findings,
    )


def _skip(ctx: Context, cid: str, why: str) -> None:
    ctx.add(cid, "skip", None, None, why, action="none", findings=[])


def _by_bus(gpus: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {normalise_bus(str(g.get("bus_id") or "")): g for g in gpus if g.get("bus_id")}


def expected_gpus(stack: dict[str, Any]) -> int | None:
    value = (stack.get("health") or {}).get("expected_gpus")
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _gpu_count(ctx: Context, gpu: dict[str, Any], gpus: list[dict[str, Any]]) -> None:
    pci = [normalise_bus(str(g.get("slot") or "")) for g in gpu.get("pci_gpus") or []]
    smi = _by_bus(gpus)
    if not smi:
        smi = {
            normalise_bus(str(g.get("pci_bus_id") or "")): {
                "index": g.get("index"),
                "bus_id": g.get("pci_bus_id"),
                "uuid": g.get("uuid"),
            }
            for g in gpu.get("gpus") or []
        }
    expected = expected_gpus(ctx.stack)
    findings = []
    for bus in pci:
        if smi and bus not in smi:
            ref = {"index": None, "bus_id": bus, "uuid": None}
            findings.append(
                _finding(
                    ref,
                    "%s on the PCI bus, not in nvidia-smi" % bus,
                    "every GPU on the bus answers nvidia-smi",
                    data.ACTION["gpu_missing"],
                    "GPU at %s is on the PCI bus but nvidia-smi does not see it" % bus,
                )
            )
    seen = len(smi) if smi else 0
    if expected is not None and seen < expected and not findings:
        findings.append(
            _finding(
                {"index": None, "bus_id": None, "uuid": None},
                "%d GPUs" % seen,
                "%d expected" % expected,
                data.ACTION["gpu_missing"],
                "nvidia-smi sees %d GPUs, %d expected (lspci lists %d)"
                % (seen, expected, len(pci)),
            )
        )
    _report(
        ctx,
        "health.gpu_count",
        findings,
        "%d GPUs (lspci %s, expected %s)"
        % (
            seen,
            len(pci) if gpu.get("lspci_available") else "n/a: not installed",
            expected if expected is not None else "not set",
        ),
        "lspci = nvidia-smi" + (" = %d" % expected if expected is not None else ""),
    )
    ctx.report["health_gpu_count"] = seen


def _xid(ctx: Context, health: dict[str, Any], gpus: list[dict[str, Any]]) -> None:
    if health.get("kernel_log") in (None, "unavailable"):
        _skip(ctx, "health.xid", "the kernel log is not readable (journalctl -k and dmesg)")
        return
    by_bus = _by_bus(gpus)
    findings = []
    seen: set[tuple[int, str]] = set()
    for entry in health.get("xid") or []:
        key = (int(entry["xid"]), str(entry["bus"]))
        if key in seen:
            continue
        seen.add(key)
        severity, action, meaning = data.XID_CATALOG.get(
            key[0], ("warning", "monitor", "not in provision's Xid table: see NVIDIA's catalogue")
        )
        g = by_bus.get(key[1])
        ref = _gpu_ref(g) if g else {"index": None, "bus_id": key[1], "uuid": None}
        findings.append(
            _finding(
                ref,
                "Xid %d on %s" % (key[0], ref.get("bus_id")),
                "no Xid with an action above monitor",
                action,
                "%s: Xid %d, %s, %s" % (_name(ref), key[0], meaning, severity),
            )
        )
    _report(ctx, "health.xid", findings, "no Xid since boot", "no Xid above monitor")


def _ecc(ctx: Context, gpus: list[dict[str, Any]]) -> None:
    t = data.THRESHOLDS
    findings = []
    for g in gpus:
        ref = _gpu_ref(g)
        vol = g.get("ecc_volatile_uncorrectable")
        agg = g.get("ecc_aggregate_uncorrectable")
        if vol is not None and vol > t["ecc_volatile_uncorrectable_max"]:
            findings.append(
                _finding(
                    ref,
                    "%d uncorrectable volatile" % vol,
                    "<= %d" % t["ecc_volatile_uncorrectable_max"],
                    data.ACTION["ecc_volatile"],
                    "%s: %d uncorrectable volatile ECC errors" % (_name(ref), vol),
                )
            )
        elif agg is not None and agg > t["ecc_aggregate_uncorrectable_max"]:
            findings.append(
                _finding(
                    ref,
                    "%d uncorrectable aggregate" % agg,
                    "<= %d" % t["ecc_aggregate_uncorrectable_max"],
                    data.ACTION["ecc_aggregate"],
                    "%s: %d uncorrectable aggregate ECC errors" % (_name(ref), agg),
                )
            )
        if g.get("retired_pending"):
            findings.append(
                _finding(
                    ref,
                    "page retirement pending",
                    "none pending",
                    data.ACTION["retired_pending"],
                    "%s: a retired page is pending (takes effect at the next reset)" % _name(ref),
                )
            )
    _report(ctx, "health.ecc", findings, "no uncorrectable ECC error", "0 uncorrectable")


def _row_remap(ctx: Context, gpus: list[dict[str, Any]]) -> None:
    findings = []
    for g in gpus:
        ref = _gpu_ref(g)
        if g.get("remap_failure"):
            findings.append(
                _finding(
                    ref,
                    "remapping failure occurred",
                    "no failure",
                    data.ACTION["remap_failure"],
                    "%s: row remapping failed (no spare rows)" % _name(ref),
                )
            )
        elif g.get("remap_pending"):
            findings.append(
                _finding(
                    ref,
                    "remap pending",
                    "none pending",
                    data.ACTION["remap_pending"],
                    "%s: a row remap is pending (needs a GPU reset)" % _name(ref),
                )
            )
    _report(ctx, "health.row_remap", findings, "no remap pending or failed", "none")


def _pcie(ctx: Context, gpus: list[dict[str, Any]]) -> None:
    findings = []
    for g in gpus:
        ref = _gpu_ref(g)
        cur, top = g.get("pcie_width_current"), g.get("pcie_width_max")
        if cur is not None and top is not None and cur < top:
            findings.append(
                _finding(
                    ref,
                    "x%d" % cur,
                    "x%d (the maximum)" % top,
                    data.ACTION["pcie_width"],
                    "%s: PCIe link x%d of x%d" % (_name(ref), cur, top),
                )
            )
    _report(ctx, "health.pcie_link", findings, "every link at its maximum width", "max width")


def _throttle(ctx: Context, gpus: list[dict[str, Any]]) -> None:
    findings = []
    for g in gpus:
        ref = _gpu_ref(g)
        reasons = list(g.get("throttle_active") or [])
        if not reasons:
            continue
        action = max(
            (
                data.ACTION[
                    "throttle_sw_thermal" if r == "SW Thermal Slowdown" else "throttle_hw"
                ]
                for r in reasons
            ),
            key=_rank,
        )
        what = ", ".join(reasons)
        findings.append(
            _finding(ref, "%s active" % what, "not active", action, "%s: %s active" % (
                _name(ref), what))
        )
    _report(ctx, "health.throttle", findings, "no HW/thermal slowdown", "not active")


def _nvlink(ctx: Context, gpu: dict[str, Any], health: dict[str, Any]) -> None:
    status = health.get("nvlink")
    if status is None:
        _skip(ctx, "health.nvlink", "no NVLink on this host (nvidia-smi topo -m)")
        return
    findings = []
    uuids = {str(g.get("uuid")): g for g in health.get("gpus") or []}
    for entry in status:
        g = uuids.get(str(entry.get("uuid"))) or {
            "index": entry.get("index"),
            "uuid": entry["uuid"],
        }
        ref = _gpu_ref(g)
        if entry.get("all_inactive") or entry.get("inactive"):
            what = (
                "all links inactive"
                if entry.get("all_inactive")
                else "links %s inactive" % ",".join(str(x) for x in entry["inactive"])
            )
            findings.append(
                _finding(
                    ref,
                    what,
                    "every link active",
                    data.ACTION["nvlink_inactive"],
                    "%s: NVLink %s" % (_name(ref), what),
                )
            )
    limit = data.THRESHOLDS["nvlink_error_counter_max"]
    for index, counters in sorted((health.get("nvlink_errors") or {}).items()):
        bad = {k: v for k, v in counters.items() if v > limit}
        if bad:
            g = next((x for x in health.get("gpus") or [] if x.get("index") == int(index)), None)
            ref = _gpu_ref(g) if g else {"index": int(index), "bus_id": None, "uuid": None}
            figure = ", ".join("%s %d" % kv for kv in sorted(bad.items()))
            findings.append(
                _finding(
                    ref,
                    figure,
                    "<= %d" % limit,
                    data.ACTION["nvlink_errors"],
                    "%s: NVLink %s" % (_name(ref), figure),
                )
            )
    _report(ctx, "health.nvlink", findings, "every NVLink active, no errors", "all active")


def _fabric(ctx: Context, gpu: dict[str, Any], gpus: list[dict[str, Any]]) -> None:
    if not gpu.get("nvswitch_present"):
        if gpu.get("lspci_available"):
            why = "no NVSwitch on the PCI bus"
        elif gpu.get("nvlink_ruled_out"):
            why = "no NVLink between the GPUs (nvidia-smi topo -m), so no NVSwitch fabric"
        else:
            why = (
                "NVSwitch presence unknown: lspci is missing (pciutils not installed) and "
                "nvidia-smi -q shows no fabric"
            )
        _skip(ctx, "health.fabric", why)
        return
    findings = []
    fm = ctx.section("units").get("nvidia-fabricmanager") or {}
    if fm.get("active") != "active":
        findings.append(
            _finding(
                {"index": None, "bus_id": None, "uuid": None},
                "nvidia-fabricmanager %s" % (fm.get("active") or "not found"),
                "active",
                data.ACTION["fabric"],
                "nvidia-fabricmanager is %s on an NVSwitch system"
                % (fm.get("active") or "not installed"),
            )
        )
    for g in gpus:
        state = g.get("fabric_state")
        if state is not None and state != "Completed":
            ref = _gpu_ref(g)
            findings.append(
                _finding(
                    ref,
                    "fabric state %s" % state,
                    "Completed",
                    data.ACTION["fabric"],
                    "%s: fabric state %s (status %s)" % (_name(ref), state, g.get("fabric_status")),
                )
            )
    _report(ctx, "health.fabric", findings, "fabric manager active, fabric Completed", "Completed")


def _driver_coherence(ctx: Context, gpu: dict[str, Any], health: dict[str, Any]) -> None:
    loaded = health.get("proc_version")
    if gpu.get("state") == "not_installed" and not loaded:
        _skip(ctx, "health.driver_coherence", "no NVIDIA driver installed")
        return
    userspace = gpu.get("nvml_library_version") or gpu.get("driver_version")
    none = {"index": None, "bus_id": None, "uuid": None}
    findings = []
    if gpu.get("state") == "version_mismatch":
        findings.append(
            _finding(
                none,
                "loaded %s, userspace %s" % (loaded or "?", userspace or "?"),
                "equal",
                data.ACTION["driver_mismatch"],
                "the loaded kernel module %s is not the installed userspace %s"
                % (loaded or "(unknown)", userspace or "(unknown)"),
            )
        )
    elif loaded and userspace and loaded != userspace and gpu.get("state") == "ok":
        findings.append(
            _finding(
                none,
                "loaded %s, userspace %s" % (loaded, userspace),
                "equal",
                data.ACTION["driver_mismatch"],
                "the loaded kernel module %s is not the userspace %s" % (loaded, userspace),
            )
        )
    kernel = ctx.section("kernel")
    default = kernel.get("default_kernel") or ""
    ko = kernel.get("nvidia_ko") or {}
    if loaded and default and ko and default in ko and not ko.get(default):
        findings.append(
            _finding(
                none,
                "no nvidia.ko for %s" % default,
                "a module for the next boot's kernel",
                data.ACTION["driver_next_boot"],
                "the kernel that boots next (%s) has no NVIDIA module: the GPUs are gone after "
                "the next reboot" % default,
            )
        )
    # a module missing for the next kernel is a difference from the stack `provision` fixes
    # (driver.next_boot names it too): drift in check mode; a loaded/userspace split is broken
    only_next_boot = bool(findings) and all(
        f["action"] == data.ACTION["driver_next_boot"] for f in findings
    )
    _report(
        ctx,
        "health.driver_coherence",
        findings,
        "loaded %s = userspace %s" % (loaded or "?", userspace or "?"),
        "one driver version",
        status=ctx.bad if only_next_boot else "",
    )


def judge(ctx: Context) -> None:
    gpu = ctx.section("gpu")
    health = ctx.section("health")
    if not health or (gpu.get("state") in ("not_installed", "no_device") and not gpu.get(
        "pci_gpus"
    )):
        for spec in CHECKS:
            _skip(ctx, spec.id, "no NVIDIA GPU on this host")
        return
    gpus = health.get("gpus") or []
    _xid(ctx, health, gpus)
    _driver_coherence(ctx, gpu, health)
    if gpu.get("state") != "ok":
        # no driver answering (not installed, not loaded, mismatch): the driver.* checks and
        # health.driver_coherence say why; the GPUs cannot be judged
        why = "nvidia-smi does not answer (%s)" % (gpu.get("message") or gpu.get("state"))
        for cid in (
            "health.gpu_count",
            "health.ecc",
            "health.row_remap",
            "health.pcie_link",
            "health.throttle",
            "health.nvlink",
            "health.fabric",
        ):
            _skip(ctx, cid, why)
        _worst(ctx)
        return
    _gpu_count(ctx, gpu, gpus)
    if gpus:
        _ecc(ctx, gpus)
        _row_remap(ctx, gpus)
        _pcie(ctx, gpus)
        _throttle(ctx, gpus)
    else:
        why = "nvidia-smi -q gave no GPU (%s)" % (gpu.get("message") or gpu.get("state"))
        for cid in ("health.ecc", "health.row_remap", "health.pcie_link", "health.throttle"):
            _skip(ctx, cid, why)
    _nvlink(ctx, gpu, health)
    _fabric(ctx, gpu, gpus)
    _worst(ctx)


def _worst(ctx: Context) -> None:
    worst = max(
        (str(c.get("action") or "none") for c in ctx.checks if c["id"].startswith("health.")),
        key=_rank,
        default="none",
    )
    ctx.report["health_action"] = worst
