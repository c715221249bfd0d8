#!/bin/bash
# The width-128 step's perf samples split by attention/not and micro-kernel/not (README's table).
cd /work/main
LOOM_CPU_ISA=${ISA:-avx2} OMP_NUM_THREADS=1 perf record -q -e cpu-clock -F 2000 --call-graph dwarf,8192 -o /tmp/p2.data \
  build/benchmarks/train_bench --rounds 1 --steps 10 --warmup 1 --peer none
perf script -i /tmp/p2.data -F ip,sym > /tmp/p2.txt 2>/dev/null
python3 - <<'PY'
import collections
c = collections.Counter()
for s in open('/tmp/p2.txt').read().split('\n\n'):
    lines = [l.strip() for l in s.strip().split('\n') if l.strip()]
    if not lines or not any('Trainer::step' in l for l in lines):
        continue
    c['step'] += 1
    att = any('cpu::attention_' in l for l in lines)
    c[('attention' if att else 'rest', 'micro' if 'sgemm_micro' in lines[0] else 'other')] += 1
for k, v in c.items():
    print(k, v, '%.1f%%' % (100 * v / c['step']))
PY
