#!/usr/bin/env bash
# Fuzzes loom's readers with libFuzzer: the safetensors reader, a checkpoint's state.json, a sharded
# checkpoint's rank file (its piece table and pieces), the llm.c token-shard reader, the topology
# JSON loader, the BPE vocabulary readers (vocab.json + merges.txt, tokenizer.json) and the llm.c
# model file reader (fuzz/*.cpp).
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s each, every target)
# Builds fuzz/ with clang++ (ASan + UBSan) into $LOOM_FUZZ_BUILD_DIR (default build-fuzz/), then
# runs each target for SECONDS from its seed corpus fuzz/corpus/<target>/ (new inputs go to a
# working corpus in the build directory, not into the repository). An input that crashes, leaks,
# takes over 10 s, needs over 2 GiB or throws anything but a loom::Error is a finding: it is kept
# in the build directory (crash-*, leak-*, timeout-*, oom-*), and the script fails. Without clang
# or its libFuzzer runtime it says so and exits 77 (CTest: skipped).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors checkpoint_state piece_file token_shard topology_json bpe_vocab tokenizer_json llmc_model encrypted_file audit_log)
build=${LOOM_FUZZ_BUILD_DIR:-$root/build-fuzz}
case $seconds in ''|*[!0-9]*) echo "fuzz: SECONDS must be a whole number, got '$seconds'" >&2; exit 2;; esac

if ! command -v clang++ > /dev/null; then
  echo "fuzz: skipped: clang++ is not installed (apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
probe=$(mktemp -d)
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2> "$probe/err"; then
  echo "fuzz: skipped: clang++ cannot link libFuzzer ($(head -1 "$probe/err")); apt-get install libclang-rt-14-dev"
  rm -rf "$probe"
  exit 77
fi
rm -rf "$probe"

if ! out=$(CXX=clang++ cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo 2>&1) ||
   ! out=$(cmake --build "$build" --parallel "$(nproc)" 2>&1); then
  echo "$out" | tail -30
  echo "fuzz: the build failed" >&2
  exit 1
fi

failed=()
for target in "${targets[@]}"; do
  binary="$build/fuzz_$target"
  seeds="$root/fuzz/corpus/$target"
  if [ ! -x "$binary" ] || [ ! -d "$seeds" ]; then
    echo "fuzz: unknown target '$target' (fuzz/$target.cpp and fuzz/corpus/$target/)" >&2
    exit 2
  fi
  work="$build/corpus/$target"
  mkdir -p "$work" "$build/findings/$target"
  log="$build/$target.log"
  # detect_leaks: a reader that leaks on a bad input is a finding too.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$target/" "$work" "$seeds" > "$log" 2>&1
  code=$?
  runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
  if [ $code -eq 0 ]; then
    printf "fuzz %-17s ok      %10s runs in %s s, corpus %s inputs\n" "$target" "$runs" "$seconds" "$(ls "$work" | wc -l)"
  else
    printf "fuzz %-17s FAILED  (exit %d) after %s runs; findings in %s\n" "$target" "$code" "$runs" "$build/findings/$target"
    grep -E "ERROR|SUMMARY|terminate|what\(\)" "$log" | head -5
    failed+=("$target")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2; exit 1; }
