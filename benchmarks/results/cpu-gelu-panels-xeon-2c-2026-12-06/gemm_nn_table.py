# loom/OpenBLAS per cell: median of the rounds' same-run ratios, with their range.
import json, glob, statistics, collections, sys
d = sys.argv[1] if len(sys.argv) > 1 else 'raw-gemm-nn'
cells = collections.defaultdict(list)
shapes = []
for f in sorted(glob.glob(d + '/r*_*_t*.json')):
    isa = f.split('_')[-2]
    T = f.split('_t')[-1].split('.')[0]
    for row in json.load(open(f))['rows']:
        if row['backend'] == 'loom' and row['isa'] == isa and row['precision'] == 'fp32' and 'blocking' not in row:
            cells[(isa, T, row['shape'])].append(row['vs_openblas'])
            if row['shape'] not in shapes: shapes.append(row['shape'])
print('| variant | threads | ' + ' | '.join(shapes) + ' |')
print('|---|---|' + '---:|' * len(shapes))
for isa in ['avx2', 'avx512']:
    for T in ['1', '2']:
        v = [cells[(isa, T, s)] for s in shapes]
        if all(v):
            print(f'| {isa} | {T} | ' + ' | '.join(f'{statistics.median(x):.3f}x ({min(x):.2f}-{max(x):.2f})' for x in v) + ' |')
