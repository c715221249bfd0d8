#!/usr/bin/env bash
# Prepares .carry/ (git-ignored) for a GPU machine that lacks loom's header-only dependencies:
# copies Eigen, Catch2, CLI11 and nlohmann-json headers with their relocatable CMake packages
# from this machine's Debian packages, and records the commit being measured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.carry"
rm -rf "$carry"
mkdir -p "$carry/usr/include" "$carry/usr/share/cmake" "$carry/usr/share/eigen3" "$carry/usr/lib/cmake"
cp -r /usr/include/eigen3 /usr/include/catch2 /usr/include/CLI /usr/include/nlohmann "$carry/usr/include/"
cp -r /usr/share/eigen3/cmake "$carry/usr/share/eigen3/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$carry/usr/share/cmake/"
cp -r /usr/lib/cmake/Catch2 "$carry/usr/lib/cmake/"
cp /usr/lib/libCatch2WithMain.a "$carry/usr/lib/"  # named by Catch2Targets.cmake
git -C "$root" rev-parse HEAD > "$carry/COMMIT"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then echo "(uncommitted changes)" >> "$carry/COMMIT"; fi
du -sh "$carry"
