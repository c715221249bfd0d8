import collections, re, sys
c = collections.Counter(); total = 0
for s in open(sys.argv[1]).read().split('\n\n'):
    lines = [l.strip() for l in s.strip().split('\n') if l.strip()]
    if not lines or not any('Trainer::step' in l for l in lines): continue
    total += 1
    leaf = lines[0].split(' ', 1)[1] if ' ' in lines[0] else lines[0]
    if 'sgemm_micro' in leaf: cat = 'micro'
    elif 'pack_' in leaf or 'transpose_rows' in leaf: cat = 'pack'
    elif 'sgemm' in leaf or 'macro_kernel' in leaf or 'run_tile' in leaf: cat = 'gemm-other'
    else:
        m = re.search(r'isa::(\w+)', leaf); cat = m.group(1) if m else re.sub(r'\(.*', '', leaf)[:50]
    mod = '?'
    for l in lines:
        m = re.search(r'loom::(nn::\w+::\w+|train::\w+::\w+|nn::detail::\w+)', l)
        if m: mod = m.group(1); break
    c[(mod, cat)] += 1
for k, v in sorted(c.items(), key=lambda kv: -kv[1])[:45]:
    print('%5.1f%%  %-45s %s' % (100 * v / total, k[0], k[1]))
bymod = collections.Counter()
for k, v in c.items(): bymod[k[0]] += v
print('--- by module')
for k, v in bymod.most_common(20): print('%5.1f%%  %s' % (100 * v / total, k))
