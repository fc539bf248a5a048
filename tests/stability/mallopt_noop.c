/*
 * mallopt_noop.c - LD_PRELOAD shim for the allocator comparison of bench/soak.sh: turns the
 * server's start-up mallopt() calls into no-ops, so the same binary runs on glibc's default
 * malloc settings (GLIBC_TUNABLES still applies). Built by bench/soak.sh; not linked in.
 */
int mallopt(int param, int value);

int mallopt(int param, int value) {
    (void)param;
    (void)value;
    return 1;
}
