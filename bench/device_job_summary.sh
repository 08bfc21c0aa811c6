#!/usr/bin/env bash
# profile(summarize=True) on real GPUs: run two zoo workloads (2 ranks, NCCL) with the in-job
# summary on, then check that the report rank 0 wrote at exit equals `profkit analyze` run
# afterwards on the same traces. Written for the lent 2 x H200 machine:
#   run it from the repository root with the msgspec and orjson cp312 wheels in .whl/;
#   results go to $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/msgspec*.whl .whl/orjson*.whl || exit 1
ROOT=$(pwd); SHIM=$(mktemp -d)/site; mkdir -p $SHIM/profkit
for f in $ROOT/profkit/*; do ln -s $f $SHIM/profkit/; done
for d in collectors analyzers dashboard; do ln -s $ROOT/$d $SHIM/profkit/$d; done
export PYTHONPATH=$SHIM:/tmp/site
cd /tmp
for name in straggler balanced; do
  t0=$(date +%s%N)
  timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node 2 $ROOT/samples/zoo/$name.py --profiler profkit --summarize --out $OUT/$name > $OUT/$name.log 2>&1; echo "$name rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))"
  grep -i "summary\|verdict\|report" $OUT/$name.log | tail -5
  python3 -m profkit analyze $OUT/$name --format json -o $OUT/$name.after.json --no-cache 2>&1 | tail -1
  python3 - $OUT/$name <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
a = json.loads((d / "profkit-report" / "report.json").read_text())
b = json.loads(pathlib.Path(str(d) + ".after.json").read_text())
print("in-job report == analyze afterwards:", a == b)
print("verdict:", a["verdict"]["summary"])
print("stragglers:", [s["rank"] for s in a["stragglers"]])
PY
done
rm -rf $OUT/*/traces/*.json.gz.tmp 2>/dev/null; du -sh $OUT
