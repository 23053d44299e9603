#!/usr/bin/env bash
# Real captures on a GPU machine (read-only: no -pm/-r/-rac, no counter resets), and the validation
# program on its GPUs with NCCL. Run from the repository root; OUT is where results go.
# What it captured on an H200 is in tests/unit/fixtures/captures/*_h200_device_*.txt (SOURCES.md).
set -u
OUT=${OUT:-/tmp/capture}
C=$OUT/c
mkdir -p "$C"
cap() { local name=$1; shift; { echo "\$ $*"; timeout 60 "$@" 2>&1; echo "[rc=$?]"; } >"$C/$name.txt"; }
cap nvidia-smi nvidia-smi
cap nvidia-smi-q nvidia-smi -q
for d in ECC ROW_REMAPPER PCI PERFORMANCE CLOCK PAGE_RETIREMENT TEMPERATURE POWER; do
  cap "nvidia-smi-q-d-$d" nvidia-smi -q -d "$d"
done
cap nvidia-smi-L nvidia-smi -L
cap nvidia-smi-version nvidia-smi --version
cap nvidia-smi-help-query-gpu nvidia-smi --help-query-gpu
cap nvidia-smi-query-gpu-health nvidia-smi --format=csv --query-gpu=index,pci.bus_id,uuid,name,serial,driver_version,vbios_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.mode.current,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending,clocks_event_reasons.active,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sw_power_cap,temperature.gpu,power.draw,persistence_mode,mig.mode.current,fabric.state,fabric.status
cap nvidia-smi-query-remapped nvidia-smi --format=csv --query-remapped-rows=gpu_bus_id,gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure
cap nvidia-smi-query-retired nvidia-smi --format=csv --query-retired-pages=gpu_bus_id,retired_pages.address,retired_pages.cause
cap nvidia-smi-nvlink-s nvidia-smi nvlink -s
cap nvidia-smi-nvlink-e nvidia-smi nvlink -e
cap nvidia-smi-nvlink-c nvidia-smi nvlink -c
cap nvidia-smi-topo-m nvidia-smi topo -m
cap proc-driver-nvidia-version cat /proc/driver/nvidia/version
cap proc-driver-nvidia-gpus sh -c 'for f in /proc/driver/nvidia/gpus/*/information; do echo "== $f"; cat "$f"; done'
cap lspci-vv sh -c 'lspci -vv -d 10de: 2>&1 || echo no lspci'
cap dmesg-nvrm sh -c 'dmesg 2>&1 | grep -iE "nvrm|xid|nvidia" | tail -50'
cap journalctl-k sh -c 'journalctl -k -o short-iso --no-pager 2>&1 | grep -iE "nvrm|xid" | tail -50'
cap dcgmi sh -c 'command -v dcgmi && dcgmi discovery -l || echo "no dcgmi"'
cap systemctl-fm sh -c 'systemctl is-active nvidia-fabricmanager nvidia-persistenced 2>&1 || true'
cap os-release cat /etc/os-release
cap uname uname -a
cap torch-smoke python3 -c 'import torch,json; print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "nccl": ".".join(map(str, torch.cuda.nccl.version())), "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}))'

# the validation program, NCCL on every GPU of this machine (one H200: world size 1)
N=$(nvidia-smi -L | grep -c '^GPU ')
R=$OUT/r; mkdir -p "$R"
export PYTHONPATH=$PWD/roles/validation/files
start=$(date +%s)
timeout 300 torchrun --standalone --nproc-per-node "$N" -m provision_validate run --results-dir "$R" \
  --backend nccl --thresholds roles/validation/files/thresholds.yml >"$C/validate-torchrun.txt" 2>&1
rc=$?
python3 -m provision_validate merge --results-dir "$R" --out "$OUT/validate-node.json" \
  --nproc-per-node "$N" --rc "$rc" --timeout 300 --elapsed $(( $(date +%s) - start )) \
  >"$C/validate-merge.txt" 2>&1
echo "merge rc=$?" >>"$C/validate-merge.txt"
tar -C "$OUT" -czf "$OUT/captures.tar.gz" c
rm -rf "$C" "$R"
ls -la "$OUT"
