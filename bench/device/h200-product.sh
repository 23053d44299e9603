#!/usr/bin/env bash
# The product itself on a GPU machine, as an operator runs it there: the wheel built from this tree
# and its dependencies as wheels (.whl, carried; the machine reaches no index), installed into
# /tmp/site; then, over a local connection as root:
#   1. `provision check --local`, then with `--deep` (the nightly read-only check: stack and GPU
#      health; the deep tier is DCGM's diagnostic where DCGM is installed),
#   2. `provision validate --local --no-deep --stack bench/device/h200-stack.yml` (the validation job
#      on the machine's GPUs with NCCL, through the validation role),
# each with its report directory, exit code and wall time. Read-only but for validation's temporary
# directory. Results: $OUT/summary.txt and $OUT/product.tar.gz (report.json, junit.xml,
# provision.prom, the console output of each command).
set -u
OUT=${OUT:-/tmp/product}
R=$OUT/r
mkdir -p "$R"
exec > >(tee "$OUT/summary.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(uname -r) $(python3 --version) $(command -v python3) uid=$(id -u)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "pip install failed"; exit 2; }
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
provision --version || { echo "provision did not start"; exit 2; }
# Ansible's interpreter discovery looks in /usr/bin and the like; an image whose only Python is a
# venv's gets that one named
PYI=()
[ -x /usr/bin/python3 ] || PYI=(-e "ansible_python_interpreter=$(command -v python3)")
step() {  # name, then the command
  local name=$1; shift
  local t0 rc
  t0=$EPOCHREALTIME
  timeout 300 "$@" >"$R/$name.out" 2>&1
  rc=$?
  echo "== $name: rc=$rc wall=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')")s: $*"
  tail -n 40 "$R/$name.out"
}
step check1 provision check --local "${PYI[@]}" --report-dir "$R/check1"
step check2 provision check --local --deep "${PYI[@]}" --report-dir "$R/check2"
step validate provision validate --local --no-deep --stack bench/device/h200-stack.yml "${PYI[@]}" \
  --report-dir "$R/validate"
for d in check1 check2 validate; do
  python3 - "$R/$d/report.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
print("--", sys.argv[1], "exit", r.get("exit_code"), "duration", r.get("duration_s"))
for name, h in r.get("hosts", {}).items():
    print("--", name, h.get("status"), h.get("message") or "")
    for c in h.get("checks", []):
        print(f"   {c.get('status'):7} {c.get('id'):28} {str(c.get('actual'))[:60]!s:60} {(c.get('message') or '')[:110]}")
PY
done
tar -C "$R" -czf "$OUT/product.tar.gz" .
ls -la "$OUT"
