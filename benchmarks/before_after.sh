#!/bin/bash
# Alternate `gpuscope diagnose FILE` between two checkouts N times (before, after, before, ...)
# and print, per checkout and file, the min and median wall and CPU (user + system) seconds and
# the peak RSS (GNU time's %M). Alternating keeps a shared machine's drift out of the comparison.
#
#   N=9 benchmarks/before_after.sh BEFORE_TREE AFTER_TREE [FILE...]
#
# Each tree is a checkout with its C extensions built; it runs with its own src/ on PYTHONPATH
# and the python on PATH. Default files: issue 17's two, from ../shared/corpus.
set -euo pipefail
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd); shift 2
corpus="$(cd "$(dirname "$0")/../.." && pwd)/shared/corpus"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$corpus/kineto/hta/df_index_resolver/df_index_resolver.json.gz"
                                 "$corpus/nsys/nsys-ai/h100_2gpu_1s.sqlite")
N=${N:-9}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
# Both trees run as users run them: bytecode cached (some shells set PYTHONDONTWRITEBYTECODE,
# which would make every run of an editable checkout recompile its sources), warmed untimed.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$out/pycache"
for f in "${files[@]}"; do
  : > "$out/before"; : > "$out/after"; : > "$out/before.us"; : > "$out/after.us"
  for tree in "$before" "$after"; do
    (cd "$tree" && PYTHONPATH="$tree/src" python -m gpuscope diagnose "$f" > /dev/null)
  done
  for _ in $(seq "$N"); do
    for side in before after; do
      tree=$before; [ $side = after ] && tree=$after
      start=$(date +%s%N)
      (cd "$tree" && PYTHONPATH="$tree/src" /usr/bin/time -f "%e %U %S %M" -a -o "$out/$side" \
        python -m gpuscope diagnose "$f" > /dev/null)
      echo $(( ($(date +%s%N) - start) / 1000 )) >> "$out/$side.us"
    done
  done
  for side in before after; do
    python - "$out/$side" "$side" "$(basename "$f")" <<'PY'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1]) if line[:1].isdigit()]
# Wall time from the shell's clock in microseconds (GNU time's %e has 10 ms steps).
wall = [int(line) / 1e6 for line in open(sys.argv[1] + ".us")]
cpu = [r[1] + r[2] for r in rows]
rss = max(r[3] for r in rows) / 1024
print(f"{sys.argv[3]:28s} {sys.argv[2]:6s} wall min {min(wall):.4f} med {statistics.median(wall):.4f}"
      f"  cpu min {min(cpu):.2f} med {statistics.median(cpu):.2f}  peak RSS {rss:.1f} MB")
PY
  done
done
