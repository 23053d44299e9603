#!/usr/bin/env bash
# bench/gpu.sh: P5 and P6 on a real GPU machine (issue 13), one prepared script.
#
#   bench/gpu.sh [--dry-run] [--out DIR] [--repeat N] [--python PY] [--max-bytes SIZE]
#
# 1. GPU facts: plugins/module_utils/gpu.py gather() (what the probe module reports), live.
# 2. The validation program (roles/validation/files/provision_validate) under torchrun, NCCL,
#    world size = the number of GPUs, as roles/validation/tasks/main.yml runs it; wall time of
#    torchrun + merge (P6: <= 3 min per 8-GPU node); busbw per message size and the DDP step time
#    from its result.
# 3. nccl-tests' all_reduce_perf over the same sizes, against the NCCL library torch loads (the
#    nvidia-nccl-cu12 wheel), if it is on PATH, in $NCCL_TESTS_DIR/build, or buildable from a source
#    tree in $NCCL_TESTS_SRC with nvcc (the device machines reach no network: bring the source).
#    P5: torch busbw / nccl-tests busbw at every size >= 1 GiB >= 0.95.
# Runs 2 and 3 alternate (torch, nccl-tests, nccl-tests, torch, ...) --repeat times (default 3);
# figures are medians. Result: DIR/gpu-result.json (default $OUT or bench/results/gpu-<date>).
#
# --dry-run needs no GPU: it prints every command it would run, then runs the parsing and the
# summary on recorded sample outputs (bench/samples/: the lab's simulated nvidia-smi/lspci for an
# 8x H100 host, a real lab validation result with gloo on CPU, a synthetic all_reduce_perf table),
# with the P5 size floor lowered to the samples' sizes (P5_MIN_BYTES) so that the arithmetic runs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dry=0
repeat="${GPU_REPEAT:-3}"
py="${PYTHON:-}"
max_bytes="${MAX_BYTES:-4G}"
out="${OUT:-}"

while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --out) out="$2"; shift ;;
    --repeat) repeat="$2"; shift ;;
    --python) py="$2"; shift ;;
    --max-bytes) max_bytes="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

[ -n "$out" ] || out="$repo/bench/results/gpu-$(date +%F)$([ "$dry" = 1 ] && echo -dry-run)"
mkdir -p "$out"
log() { echo "[gpu.sh $(date +%T)] $*" | tee -a "$out/gpu.log" >&2; }
show() { log "+ $*"; }

if [ -z "$py" ]; then
  for cand in /opt/pytorch/bin/python python3; do
    if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
  done
fi
parse=("${py:-python3}" "$repo/bench/gpu_parse.py")
[ "$dry" = 1 ] && parse=(python3 "$repo/bench/gpu_parse.py")

# ---------------------------------------------------------------------------------- facts
if [ "$dry" = 1 ]; then
  show "${parse[*]} facts   (dry run: replayed from bench/samples/gpu-facts)"
  "${parse[@]}" facts --replay "$repo/bench/samples/gpu-facts" > "$out/facts.json"
else
  show "${parse[*]} facts"
  "${parse[@]}" facts > "$out/facts.json"
fi
ngpu="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu_count"])' "$out/facts.json")"
log "GPU facts: $ngpu GPU(s): $(python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); print(f["gpu_model"], f["state"], f["topology"]["interconnect"])' "$out/facts.json")"

if [ "$dry" = 0 ]; then
  if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)'; then
    log "error: $py has no torch with CUDA and NCCL (set PYTHON=...)"; exit 4
  fi
  tgpus="$("$py" -c 'import torch; print(torch.cuda.device_count())')"
  [ "$tgpus" = "$ngpu" ] || log "note: the facts list $ngpu GPU(s), torch sees $tgpus: using torch's"
  ngpu="$tgpus"
fi
[ "$ngpu" -ge 1 ] || { log "error: no GPU"; exit 4; }

# ---------------------------------------------------------------------------------- validation
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$repo/roles/validation/files/provision_validate" "$work/"
# the program reads JSON, or YAML when its interpreter has PyYAML: convert with whichever has it
to_json='import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), open(sys.argv[2], "w"))'
for cand in python3 "${py:-python3}"; do
  if "$cand" -c "$to_json" "$repo/roles/validation/files/thresholds.yml" "$work/thresholds.json" 2>/dev/null; then
    break
  fi
  cp "$repo/roles/validation/files/thresholds.yml" "$work/thresholds.json"
done
model="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu_model"] or "")' "$out/facts.json")"
topo="$(python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); t=dict(f["topology"]); t["nvswitch_count"]=f["nvswitch_count"]; print(json.dumps(t))' "$out/facts.json")"

validation_cmd() {  # $1 = results dir
  echo timeout -k 10 1200 "$py" -m torch.distributed.run --standalone --nproc-per-node "$ngpu" \
    --max-restarts 0 -m provision_validate run --results-dir "$1" \
    --thresholds "$work/thresholds.json" --backend nccl --topology auto \
    --max-bytes "$max_bytes" ${model:+--gpu-model "'$model'"} --topology-facts "'$topo'"
}

run_validation() {  # $1 = run dir
  local d="$1" t0 t1 rc=0
  mkdir -p "$d/results"
  t0="$(date +%s.%N)"
  PYTHONPATH="$work" timeout -k 10 1200 "$py" -m torch.distributed.run --standalone \
    --nproc-per-node "$ngpu" --max-restarts 0 -m provision_validate run \
    --results-dir "$d/results" --thresholds "$work/thresholds.json" --backend nccl \
    --topology auto --max-bytes "$max_bytes" ${model:+--gpu-model "$model"} \
    --topology-facts "$topo" > "$d/torchrun.log" 2>&1 || rc=$?
  t1="$(date +%s.%N)"
  PYTHONPATH="$work" "$py" -m provision_validate merge --results-dir "$d/results" \
    --host "$(hostname)" --nproc-per-node "$ngpu" --rc "$rc" --timeout 1200 \
    --elapsed "$(python3 -c "print(round($t1 - $t0, 2))")" \
    --torchrun-output="$(tail -c 2000 "$d/torchrun.log")" --out "$d/validation.json" || true
  python3 -c "print(round($(date +%s.%N) - $t0, 3))" > "$d/wall_s"
  log "validation: torchrun rc $rc, $(cat "$d/wall_s") s"
}

# ---------------------------------------------------------------------------------- nccl-tests
nccl_home=""
if [ "$dry" = 0 ]; then
  nccl_home="$("$py" -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])' 2>/dev/null || true)"
fi
perf=""
find_perf() {
  if command -v all_reduce_perf >/dev/null 2>&1; then perf="$(command -v all_reduce_perf)"; return; fi
  if [ -n "${NCCL_TESTS_DIR:-}" ] && [ -x "$NCCL_TESTS_DIR/build/all_reduce_perf" ]; then
    perf="$NCCL_TESTS_DIR/build/all_reduce_perf"; return
  fi
  if [ -n "${NCCL_TESTS_SRC:-}" ] && [ -d "$NCCL_TESTS_SRC/src" ] && command -v nvcc >/dev/null 2>&1 \
     && [ -n "$nccl_home" ]; then
    local cuda_home nccl_link="$work/nccl"
    cuda_home="$(dirname "$(dirname "$(command -v nvcc)")")"
    # the wheel ships libnccl.so.2 only; the link step wants libnccl.so: a private NCCL_HOME
    mkdir -p "$nccl_link/lib"
    ln -sf "$nccl_home/include" "$nccl_link/include"
    ln -sf "$nccl_home/lib/libnccl.so.2" "$nccl_link/lib/libnccl.so.2"
    ln -sf libnccl.so.2 "$nccl_link/lib/libnccl.so"
    log "building nccl-tests in $NCCL_TESTS_SRC against $nccl_home"
    if make -C "$NCCL_TESTS_SRC" -j"$(nproc)" MPI=0 CUDA_HOME="$cuda_home" NCCL_HOME="$nccl_link" \
         > "$out/nccl-tests-build.log" 2>&1; then
      perf="$NCCL_TESTS_SRC/build/all_reduce_perf"
    else
      log "nccl-tests did not build (see nccl-tests-build.log)"
    fi
  fi
}
perf_args=(-b 1M -e "$max_bytes" -f 2 -g "$ngpu" -w 5 -n 20 -c 1)

run_nccl_tests() {  # $1 = run dir
  [ -n "$perf" ] || return 0
  LD_LIBRARY_PATH="${nccl_home:+$nccl_home/lib:}${LD_LIBRARY_PATH:-}" "$perf" "${perf_args[@]}" \
    > "$1/nccl-tests.txt" 2>&1 || log "all_reduce_perf exited $?"
  log "nccl-tests: $(grep -m1 'Avg bus bandwidth' "$1/nccl-tests.txt" || echo 'no summary line')"
}

# ---------------------------------------------------------------------------------- runs
if [ "$dry" = 1 ]; then
  show "$(validation_cmd "$out/run-N/results")   (PYTHONPATH=<copy of provision_validate>)"
  show "python -m provision_validate merge --results-dir $out/run-N/results --nproc-per-node $ngpu ..."
  show "all_reduce_perf ${perf_args[*]}   (LD_LIBRARY_PATH=<torch's nvidia/nccl/lib>)"
  d="$out/run-1"; mkdir -p "$d"
  cp "$repo/bench/samples/validation-node-lab-gloo.json" "$d/validation.json"
  cp "$repo/bench/samples/all_reduce_perf-synthetic.txt" "$d/nccl-tests.txt"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["elapsed_s"])' "$d/validation.json" > "$d/wall_s"
  export P5_MIN_BYTES="${P5_MIN_BYTES:-4194304}"
  mode='{"mode": "dry-run: sample outputs, not a measurement"}'
else
  find_perf
  [ -n "$perf" ] || log "nccl-tests: all_reduce_perf not found (PATH, NCCL_TESTS_DIR) and not buildable (NCCL_TESTS_SRC + nvcc): P5 is not measured"
  for i in $(seq 1 "$repeat"); do
    d="$out/run-$i"; mkdir -p "$d"
    if [ $((i % 2)) = 1 ]; then run_validation "$d"; run_nccl_tests "$d"
    else run_nccl_tests "$d"; run_validation "$d"; fi
  done
  mode='{"mode": "measured"}'
fi

host_json="$(python3 -c 'import json, os, platform; print(json.dumps({"machine": {"host": platform.node(), "kernel": platform.release(), "cpu_count": os.cpu_count()}}))')"
extra="$(python3 -c 'import json,sys; a=json.loads(sys.argv[1]); a.update(json.loads(sys.argv[2])); a["repeat"]=int(sys.argv[3]); print(json.dumps(a))' "$mode" "$host_json" "$repeat")"
"${parse[@]}" summarize --runs "$out" --out "$out/gpu-result.json" --facts "$out/facts.json" --extra "$extra"
log "wrote $out/gpu-result.json"
