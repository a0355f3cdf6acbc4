#!/usr/bin/env bash
# The GPU figures on a lent GPU machine (the issues' H100 targets), in two halves:
#
#   here:   bash benches/device.sh prepare
#           builds the GPU benchmarks and tests, strips and packs them with the Vulkan loader
#           packages into .device/ (ignored by git; about 30 MB);
#   there:  bash benches/device.sh run [NAME ...]   (the device tool's `run`, carrying `.device`)
#           unpacks the loaders, names the NVIDIA driver to Vulkan, runs the GPU tests with
#           LIVELY_REQUIRE_GPU=1 and the benchmarks at every size — or only those NAMEd, such
#           as bench-gpu_step or test-gpu_steps, to keep a call inside the tool's 10 minutes —
#           and leaves their logs in $OUT (gpu_step's ends with the table docs/perf/gpu.md wants).
#
# With LIVELY_BENCH_REDUCTIONS=tree the benchmarks keep the tree's workgroup sums where the
# device has subgroups, and their logs are named *-tree.log, so one call can run both forms.
#
# The machine there has no package registry and no toolchain: everything it runs is built
# here. The shared meshes travel in .device/meshes (LIVELY_MESHES there).
set -euo pipefail
shopt -s nullglob  # a .device without tests (or benches) runs what it has
cd "$(dirname "$0")/.."

benches=(gpu_step local_global mixed_fem self_collision)
tests=(gpu_steps budget local_global mixed_fem self_collision)  # and the library's: test-lib

case "${1:-}" in
prepare)
    log=$(mktemp)
    bench_args=(); for b in "${benches[@]}"; do bench_args+=(--bench "$b"); done
    test_args=(); for t in "${tests[@]}"; do test_args+=(--test "$t"); done
    cargo bench --no-run "${bench_args[@]}" 2>&1 | tee "$log"
    cargo test --release --no-run --lib "${test_args[@]}" 2>&1 | tee -a "$log"
    rm -rf .device
    mkdir -p .device/bench .device/test .device/debs
    # cargo names each executable: "Executable benches/gpu_step.rs (target/release/deps/...)".
    # cargo names the library's tests (the stages' parity tests) "unittests src/lib.rs": test-lib.
    grep -E '^ *Executable ((benches|tests)/|unittests src/lib.rs)' "$log" |
        sed 's|unittests src/lib.rs|tests/lib.rs|' | while read -r _ source path; do
        kind=$([[ $source == benches/* ]] && echo bench || echo test)
        name=$(basename "$source" .rs)
        path=${path#(}
        path=${path%)}
        strip -o ".device/$kind/$name" "$path"
        gzip -9 ".device/$kind/$name"
    done
    # The Vulkan loader (the device README's recipe), for x86-64 whatever this machine is, and
    # glvnd's libraries: NVIDIA's Vulkan driver lives in libGLX_nvidia, which needs them
    # (without them wgpu finds no adapter there).
    mkdir -p /tmp/amd64/partial
    apt=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${apt[@]}" update -qq
    (cd .device/debs && apt-get "${apt[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
    # The shared meshes the benchmarks load (about 3 MB), where this checkout has them.
    mkdir -p .device/meshes
    for mesh in ipc-bunny-19k.msh ipc-armadillo-55k.msh; do
        cp "../shared/meshes/$mesh" .device/meshes/ 2>/dev/null || echo "no ../shared/meshes/$mesh: its cases will be skipped there"
    done
    du -sh .device
    ;;
run)
    [ -d .device ] || { echo "no .device: run 'bash benches/device.sh prepare' here and carry .device" >&2; exit 2; }
    for f in .device/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
    icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    [ -f "$icd" ] && export VK_DRIVER_FILES=$icd
    export LIVELY_MESHES=$PWD/.device/meshes
    out=${OUT:-$(mktemp -d)}
    bin=$(mktemp -d)
    for f in .device/bench/*.gz .device/test/*.gz; do
        kind=$(basename "$(dirname "$f")")
        gunzip -c "$f" >"$bin/$kind-$(basename "$f" .gz)"
        chmod +x "$bin/$kind-$(basename "$f" .gz)"
    done
    nvidia-smi -L 2>/dev/null | tee "$out/device.txt" || true
    export LIVELY_REQUIRE_GPU=1
    shift
    wanted=("$@")
    if [ ${#wanted[@]} -eq 0 ]; then
        for t in lib "${tests[@]}"; do wanted+=("test-$t"); done
        for b in "${benches[@]}"; do wanted+=("bench-$b"); done
    fi
    status=0
    suffix=${LIVELY_BENCH_REDUCTIONS:+-$LIVELY_BENCH_REDUCTIONS}
    for name in "${wanted[@]}"; do
        [ -x "$bin/$name" ] || { echo "no $name in .device" >&2; status=1; continue; }
        case $name in
        test-*) "$bin/$name" --nocapture 2>&1 | tee "$out/$name.log" || status=1 ;;
        # LIVELY_CRITERION_ARGS: criterion's options, e.g. shorter times to fit a call's limit.
        bench-*) "$bin/$name" --bench ${LIVELY_CRITERION_ARGS:-} 2>&1 | tee "$out/$name$suffix.log" || status=1 ;;
        esac
    done
    echo "logs in $out"
    exit $status
    ;;
*)
    echo "usage: bash benches/device.sh prepare|run" >&2
    exit 2
    ;;
esac
