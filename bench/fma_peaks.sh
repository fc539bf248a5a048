# fma_peaks.sh - sourced by the bench scripts: builds bench/fma_peak.c for AVX2 and, where
# the CPU has it, AVX-512, into $BUILD/bench/fma_peak_<isa>, and sets $peaks to the ISAs
# built. The scripts run each and take the fastest as the machine's FMA peak.
peaks="avx2"
cc -O2 -DFMA_AVX2 -mavx2 -mfma -pthread bench/fma_peak.c -o "$BUILD/bench/fma_peak_avx2" ||
    die "cannot build bench/fma_peak.c"
if grep -qw avx512f /proc/cpuinfo; then
    cc -O2 -mavx512f -mfma -pthread bench/fma_peak.c -o "$BUILD/bench/fma_peak_avx512" ||
        die "cannot build bench/fma_peak.c for AVX-512"
    peaks="avx2 avx512"
fi
