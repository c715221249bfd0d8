# usage: gelu_share.sh LIBDIR ISA -> GELU backward's share of all perf samples (perf, 1 thread)
OMP_NUM_THREADS=1 LOOM_CPU_ISA=$2 LD_LIBRARY_PATH=$1 perf record -q -e cpu-clock -F 4000 -o /tmp/gc.data /work/main/build/benchmarks/train_bench --rounds 1 --steps 16 --warmup 1 --peer none > /dev/null 2>&1
perf report -i /tmp/gc.data --no-children --sort symbol 2>/dev/null | grep -v '^#' | awk -v lib=$1 '/gelu_backward/ {g+=$1} /%/ {t+=$1} END {printf "%s gelu_backward %.2f%%\n", lib, g}'
