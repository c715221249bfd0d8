# usage: step_summary.py RAWDIR : train_bench's step time and MFU per library against base (the
# library before), from step_ab.sh's JSON (files LIB_ISA_tT_..._rN.json; runs sharing everything but
# the library are one alternating group): medians, and LIB/base per group.
import collections, glob, json, os, re, statistics, sys
groups = collections.defaultdict(dict)
for path in glob.glob(os.path.join(sys.argv[1], '*.json')):
    lib, isa, t, rest = re.match(r'([a-z0-9]+?)_(avx2|avx512)_t(\d)_(.*)\.json', os.path.basename(path)).groups()
    groups[(isa, int(t), rest)][lib] = json.load(open(path))['rows'][0]
by_config = collections.defaultdict(list)
for (isa, t, rest), libs in groups.items():
    by_config[(isa, t)].append(libs)
for (isa, t), runs in sorted(by_config.items()):
    libs = sorted({l for r in runs for l in r} - {'base'})
    base_step = [r['base']['step_ms'] for r in runs]
    print('%s, %d thread(s), %d groups: base step %.2f ms, MFU %.1f%%, GEMM peak %.1f GFLOP/s (medians)' % (
        isa, t, len(runs), statistics.median(base_step), 100 * statistics.median(r['base']['mfu'] for r in runs),
        statistics.median(r['base']['gemm_peak_gflops'] for r in runs)))
    for lib in libs:
        with_lib = [r for r in runs if lib in r]
        ratio = [r[lib]['step_ms'] / r['base']['step_ms'] for r in with_lib]
        print('   %-5s step %.2f ms (base %.2f in the same groups), %s/base per group %.3f (%.3f-%.3f), faster in %d of %d; '
              'MFU %.1f%% (base %.1f%%), GEMM peak %.1f'
              % (lib, statistics.median(r[lib]['step_ms'] for r in with_lib),
                 statistics.median(r['base']['step_ms'] for r in with_lib), lib, statistics.median(ratio), min(ratio),
                 max(ratio), sum(x < 1 for x in ratio), len(ratio), 100 * statistics.median(r[lib]['mfu'] for r in with_lib),
                 100 * statistics.median(r['base']['mfu'] for r in with_lib),
                 statistics.median(r[lib]['gemm_peak_gflops'] for r in with_lib)))
