#!/usr/bin/env bash
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Check gpu_probe / gpu_info on a real NVIDIA machine: NVML and nvidia-smi must report the same GPUs and the
# same memory. Prints PASS/FAIL/SKIP lines, exits 1 on any FAIL (2 when no GPU probe could run at all).
#
#   tools/device/check_gpu_info.sh --prepare DIR   on the dev machine: copy pynvml.py, ansible-core and its
#                                                 pure-Python deps from .venv into DIR (about 22 MB; carry it)
#   tools/device/check_gpu_info.sh                 on the GPU machine, from anywhere
#
# Environment: PYTHON (default python3), PYTHONPATH (default: .tmp/device-py of the checkout when it exists),
# OUT (where outputs go; default a new temporary directory). Every step has its own timeout; the whole run
# takes well under two minutes.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if [ "${1:-}" = "--prepare" ]; then
  dest=${2:?usage: $0 --prepare DIR}
  site=$(find "$REPO"/.venv/lib -maxdepth 2 -type d -name site-packages 2>/dev/null | head -n1)
  [ -n "$site" ] || { echo "no $REPO/.venv: run make venv first" >&2; exit 1; }
  mkdir -p "$dest"
  for item in pynvml.py ansible ansible_core-*.dist-info jinja2 markupsafe yaml _yaml packaging resolvelib; do
    for path in "$site"/$item; do
      [ -e "$path" ] && cp -a "$path" "$dest"/
    done
  done
  find "$dest" -name __pycache__ -prune -exec rm -rf {} +
  du -sh "$dest"
  exit 0
fi

PYTHON=${PYTHON:-python3}
if [ -z "${PYTHONPATH:-}" ] && [ -d "$REPO/.tmp/device-py" ]; then
  export PYTHONPATH="$REPO/.tmp/device-py"
fi
OUT=${OUT:-$(mktemp -d /tmp/check_gpu_info.XXXXXX)}
mkdir -p "$OUT"
exec > >(tee "$OUT/check_gpu_info.log") 2>&1

# A collections root whose ansible_collections/llmserve/sglang is this checkout.
COLL=$(mktemp -d /tmp/check_gpu_info_coll.XXXXXX)
mkdir -p "$COLL/ansible_collections/llmserve"
ln -s "$REPO" "$COLL/ansible_collections/llmserve/sglang"
printf '[defaults]\n' > "$COLL/ansible.cfg"
trap 'rm -rf "$COLL"' EXIT

FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
skip() { echo "SKIP $*"; }

echo "== check_gpu_info: repo=$REPO out=$OUT python=$PYTHON PYTHONPATH=${PYTHONPATH:-}"
FIELDS=index,uuid,name,memory.total,memory.reserved,memory.used,memory.free,persistence_mode,mig.mode.current,driver_version

# 1. nvidia-smi as an operator sees it (also kept as real fixtures for tests/fixtures/nvidia_smi).
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "== nvidia-smi ($(command -v nvidia-smi))"
  if timeout 30 nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; then
    head -n 12 "$OUT/nvidia-smi.txt"
    pass "nvidia-smi runs"
  else
    cat "$OUT/nvidia-smi.txt"; fail "nvidia-smi exited non-zero"
  fi
  echo "== nvidia-smi --query-gpu=$FIELDS --format=csv"
  timeout 30 nvidia-smi --query-gpu="$FIELDS" --format=csv 2>&1 | tee "$OUT/query-gpu.csv"
  timeout 30 nvidia-smi --query-gpu="$FIELDS" --format=csv,noheader,nounits > "$OUT/query-gpu-noheader-nounits.csv" 2>&1
  timeout 30 nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,process_name --format=csv > "$OUT/query-compute-apps.csv" 2>&1
  timeout 30 nvidia-smi -q -d MEMORY > "$OUT/nvidia-smi-q-memory.txt" 2>&1
else
  echo "nvidia-smi: not found on PATH ($PATH)"
fi

# 2. The probe both ways, through module_utils directly, plus a 1 GiB allocation seen by both.
echo "== gpu_probe via $PYTHON"
if ! timeout 10 "$PYTHON" -c 'import sys; print(sys.version)'; then
  fail "python '$PYTHON' does not run"
  echo "== summary: $FAILS failure(s); outputs in $OUT"; exit 1
fi
timeout 100 "$PYTHON" - "$COLL" "$OUT" <<'PY'
import json, os, subprocess, sys, time
coll, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, coll)
from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_probe as gp
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import GpuProbeError
from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvml import describe_nvml_error

MIB = 2 ** 20
TOL = 64 * MIB  # free/used may move a little between two reads
fails = 0


def report(ok, text):
    global fails
    print(("PASS " if ok else "FAIL ") + text)
    fails += 0 if ok else 1


def dump(name, data):
    with open(os.path.join(out, name), "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)


def run_both(tag):
    results = {}
    for prefer in ("nvml", "nvidia_smi"):
        try:
            results[prefer] = gp.probe(prefer=prefer)
            dump("probe_%s_%s.json" % (tag, prefer), results[prefer])
            r = results[prefer]
            print("%s %s: %d GPU(s), driver %s, CUDA %s, min_free_gib %s" % (
                tag, prefer, r["gpu_count"], r["driver_version"], r["cuda_driver_version"], r["min_free_gib"]))
        except GpuProbeError as exc:
            print("%s %s: GpuProbeError: %s" % (tag, prefer, exc))
            results[prefer] = None
    return results


def compare(tag, nv, smi):
    report(nv["gpu_count"] == smi["gpu_count"] > 0, "%s gpu_count nvml=%s nvidia-smi=%s" % (tag, nv["gpu_count"], smi["gpu_count"]))
    report(nv["driver_version"] == smi["driver_version"], "%s driver_version %s / %s" % (tag, nv["driver_version"], smi["driver_version"]))
    report(nv["cuda_driver_version"] == smi["cuda_driver_version"] and nv["cuda_driver_version"],
           "%s cuda_driver_version %s / %s" % (tag, nv["cuda_driver_version"], smi["cuda_driver_version"]))
    by_uuid = {g["uuid"]: g for g in smi["gpus"]}
    for g in nv["gpus"]:
        s = by_uuid.get(g["uuid"])
        if s is None:
            report(False, "%s GPU %s %s missing from nvidia-smi" % (tag, g["index"], g["uuid"]))
            continue
        name = "%s GPU %s" % (tag, g["index"])
        report(g["index"] == s["index"] and g["name"] == s["name"], "%s index/name %s %r" % (name, s["index"], s["name"]))
        for key, tol in (("total", MIB), ("reserved", MIB), ("free", TOL), ("used", TOL)):
            a, b = g["memory_%s_bytes" % key], s["memory_%s_bytes" % key]
            ok = a is not None and b is not None and abs(a - b) < tol
            report(ok, "%s memory_%s nvml=%s nvidia-smi=%s (MiB; tolerance %d MiB)" % (
                name, key, None if a is None else round(a / MIB, 2), None if b is None else b // MIB, tol // MIB))
        report(g["persistence_mode"] == s["persistence_mode"] and g["mig_mode"] == s["mig_mode"],
               "%s persistence %s/%s mig %s/%s" % (name, g["persistence_mode"], s["persistence_mode"], g["mig_mode"], s["mig_mode"]))


def raw_nvml():
    """What NVML itself says (v1 used, v2 used/reserved), to settle what 'used' means on this driver."""
    try:
        import pynvml
    except ImportError as exc:
        print("SKIP raw NVML: %s" % exc)
        return
    print("pynvml from %s" % pynvml.__file__)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print("SKIP raw NVML: %s" % describe_nvml_error(exc, pynvml))
        return
    rows = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
            row = {"index": i, "v1_total": v1.total, "v1_free": v1.free, "v1_used": v1.used}
            try:
                v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                row.update(v2_total=v2.total, v2_free=v2.free, v2_used=v2.used, v2_reserved=v2.reserved)
            except Exception as exc:  # noqa: BLE001 - report whatever the driver says
                row["v2_error"] = repr(exc)
            rows.append(row)
            print("raw NVML GPU %d (MiB): %s" % (i, {k: (round(v / MIB, 2) if isinstance(v, int) and k != "index" else v)
                                                     for k, v in row.items()}))
    finally:
        pynvml.nvmlShutdown()
    dump("nvml_raw.json", rows)


ALLOC = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
def check(rc, what):
    if rc != 0:
        print("cuda %s failed: %d" % (what, rc), flush=True); sys.exit(3)
check(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int(); check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p(); check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptr = ctypes.c_uint64(); check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)), "cuMemAlloc 1 GiB")
print("allocated", flush=True)
time.sleep(60)
"""

raw_nvml()
before = run_both("idle")
nv, smi = before["nvml"], before["nvidia_smi"]
if nv is None and smi is None:
    print("FAIL neither NVML nor nvidia-smi could probe this machine")
    sys.exit(2)
if nv is None or smi is None:
    report(False, "both probes run (nvml=%s, nvidia-smi=%s)" % (nv is not None, smi is not None))
else:
    compare("idle", nv, smi)
    # 1 GiB held by a CUDA context on GPU 0: both must list the process and see free memory drop.
    proc = subprocess.Popen([sys.executable, "-c", ALLOC], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = ""
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if "allocated" in line or "failed" in line:
                break
        if "allocated" not in line:
            print("SKIP allocation test: %s" % (line.strip() or "no CUDA driver API (libcuda.so.1)"))
        else:
            time.sleep(1)
            after = run_both("alloc")
            if after["nvml"] and after["nvidia_smi"]:
                compare("alloc", after["nvml"], after["nvidia_smi"])
                for prefer, result in after.items():
                    gpu0 = result["gpus"][0]
                    mine = [p for p in gpu0["compute_processes"] if p["pid"] == proc.pid]
                    report(bool(mine) and (mine[0]["used_memory_bytes"] or 0) >= 1 << 30,
                           "alloc %s lists pid %d on GPU 0 with >= 1 GiB: %s" % (prefer, proc.pid, mine))
                    drop = before[prefer]["gpus"][0]["memory_free_bytes"] - gpu0["memory_free_bytes"]
                    report(drop >= (1 << 30) - TOL, "alloc %s free on GPU 0 dropped by %.0f MiB" % (prefer, drop / MIB))
            else:
                report(False, "alloc: both probes run")
    finally:
        proc.kill()
        proc.wait(timeout=10)
print("python checks: %d failure(s)" % fails)
sys.exit(1 if fails else 0)
PY
rc=$?
case $rc in
  0) ;;
  1) FAILS=$((FAILS + 1)) ;;
  2) FAILS=$((FAILS + 1)); echo "== summary: no GPU probe could run; outputs in $OUT"; exit 2 ;;
  124) fail "python checks timed out" ;;
  *) fail "python checks exited $rc" ;;
esac

# 3. The module through Ansible on localhost (check mode), when ansible-core imports with this python.
echo "== llmserve.sglang.gpu_info through ansible (localhost, --check)"
if timeout 20 "$PYTHON" -c 'import ansible.cli.adhoc' 2>/dev/null; then
  LC_ALL=C.UTF-8 LANG=C.UTF-8 ANSIBLE_COLLECTIONS_PATH="$COLL" ANSIBLE_HOME="$OUT/.ansible" \
    ANSIBLE_LOCAL_TEMP="$OUT/.ansible/tmp" ANSIBLE_NOCOLOR=1 ANSIBLE_CONFIG="$COLL/ansible.cfg" \
    ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_STDOUT_CALLBACK=minimal ANSIBLE_DEPRECATION_WARNINGS=0 \
    timeout 90 "$PYTHON" -m ansible.cli.adhoc localhost -i localhost, -c local --check \
    -e "ansible_python_interpreter=$(command -v "$PYTHON")" -m llmserve.sglang.gpu_info > "$OUT/ansible_gpu_info.txt" 2>&1
  arc=$?
  head -c 600 "$OUT/ansible_gpu_info.txt"; echo
  if [ $arc -eq 0 ]; then
    "$PYTHON" - "$OUT" <<'PY' || FAILS=$((FAILS + 1))
import json, os, sys
out = sys.argv[1]
text = open(os.path.join(out, "ansible_gpu_info.txt")).read()
res, _ = json.JSONDecoder().raw_decode(text, text.index(" => {") + 4)  # minimal: "localhost | SUCCESS => {...}"
direct = json.load(open(os.path.join(out, "probe_idle_nvml.json")))
ok = (res["source"] == "nvml" and res["changed"] is False and res["gpu_count"] == direct["gpu_count"]
      and [g["memory_total_bytes"] for g in res["gpus"]] == [g["memory_total_bytes"] for g in direct["gpus"]])
print(("PASS" if ok else "FAIL") + " ansible gpu_info: source=%s changed=%s gpu_count=%s min_free_gib=%s" % (
    res["source"], res["changed"], res["gpu_count"], res["min_free_gib"]))
sys.exit(0 if ok else 1)
PY
  else
    fail "ansible gpu_info exited $arc"
  fi
else
  skip "ansible-core does not import with $PYTHON (PYTHONPATH=${PYTHONPATH:-}); needs Python >= 3.11"
fi

echo "== summary: $FAILS failure(s); outputs in $OUT"
[ "$FAILS" -eq 0 ]
