# usage: gemm_ab_table.py RAWDIR : the median over rounds of loom / OpenBLAS (same-run) per cell, before
# (base) and after (new), and the median of loom's own time after / before per cell.
import glob, json, os, re, statistics, sys
raw = sys.argv[1]
cells = {}
for path in sorted(glob.glob(os.path.join(raw, 'r*_*_t*_*.json'))):
    r, isa, t, lib = re.match(r'r(\d+)_(\w+?)_t(\d)_(\w+)\.json', os.path.basename(path)).groups()
    for row in json.load(open(path))['rows']:
        if row['backend'] != 'loom':
            continue
        cell = cells.setdefault((isa, int(t), row['shape']), {'base': [], 'new': [], 'ms': {}})
        cell[lib].append(row['vs_openblas'])
        cell['ms'].setdefault(r, {})[lib] = row['ms']
shapes = ['1024^3', '2048^3', '1024x2304x768', '1024x768x768', '1024x3072x768', '1024x768x3072']
print('| variant | threads | ' + ' | '.join(shapes) + ' |')
print('|---|---|' + '---:|' * len(shapes))
for isa in ['avx2', 'avx512']:
    for t in [1, 2]:
        if (isa, t, shapes[0]) not in cells:
            continue
        out = []
        for s in shapes:
            c = cells[(isa, t, s)]
            own = [v['new'] / v['base'] for v in c['ms'].values() if 'new' in v and 'base' in v]
            out.append('%.3fx -> **%.3fx** (time %.3f)' % (statistics.median(c['base']), statistics.median(c['new']),
                                                          statistics.median(own)))
        print('| %s | %d | %s |' % (isa, t, ' | '.join(out)))
n = len({re.match(r'r(\d+)', os.path.basename(p)).group(1) for p in glob.glob(os.path.join(raw, 'r*.json'))})
print('\nloom / OpenBLAS, median of %d rounds: before -> after; time: loom after / before, median of the rounds.' % n)
