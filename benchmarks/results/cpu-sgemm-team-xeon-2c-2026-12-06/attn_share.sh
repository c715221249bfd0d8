# usage: attn_share.sh LIBDIR ISA -> share of all perf samples under attention_forward and
# attention_backward (children), train_bench 16 steps, 1 thread (T to change)
OMP_NUM_THREADS=${T:-1} LOOM_CPU_ISA=$2 LD_LIBRARY_PATH=$1 perf record -q --call-graph dwarf,8192 -e cpu-clock -F 1000 -o /tmp/as.data /work/main/build/benchmarks/train_bench --rounds 1 --steps 16 --warmup 1 --peer none > /dev/null 2>&1
perf report -i /tmp/as.data --children --sort symbol -g none 2>/dev/null | grep -v '^#' | awk -v lib=$1 '$4 == "loom::kernels::cpu::attention_forward" {f=$1} $4 == "loom::kernels::cpu::attention_backward" {b=$1} END {printf "%s attention forward %s backward %s\n", lib, f, b}'
