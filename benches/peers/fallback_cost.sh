#!/usr/bin/env bash
# Instructions (callgrind Ir, all threads) to decode each file of the jpeg-decoder route:
# stoker before the ran-out check, after it, and Pillow (minus Pillow's import).
set -euo pipefail
OLD=$1 NEW=$2 PY=$3 DIR=$4
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
base_old=$(ir $OLD --version); base_new=$(ir $NEW --version)
base_py=$(ir $PY -c 'import io; from PIL import Image')
printf "%-62s %12s %12s %6s %12s\n" file old new new/old pillow
for f in "$DIR"/*.jpg; do
  o=$(( $(ir $OLD decode --backend cpu "$f") - base_old ))
  n=$(( $(ir $NEW decode --backend cpu "$f") - base_new ))
  p=$(( $(ir $PY -c "import io,sys; from PIL import Image; Image.open(sys.argv[1]).convert('RGB')" "$f") - base_py ))
  printf "%-62s %12d %12d %6.2f %12d\n" "$(basename "$f")" $o $n $(echo "$n/$o" | bc -l) $p
done
