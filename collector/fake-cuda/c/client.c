/* A test client of the fake driver: allocates and frees, reaching the driver the way argv[1]
 * says ("direct": linked symbols; "proc": cuGetProcAddress; "proc_v2": cuGetProcAddress_v2;
 * "dlsym": dlopen + dlsym(handle); "dlsym_proc": the resolver found with dlsym(handle)), or
 * exercising the hook's hard cases ("threads", "fork", "exit", "kill", "pool", ...), or holding
 * memory beside other processes ("hold DIR BYTES"), and prints each call as
 * "alloc ADDR SIZE" / "free ADDR" / "oom SIZE" so tests can compare the recorded trace with what
 * happened. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
CUresult cuInit(unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void say_alloc(CUdeviceptr p, size_t size) {
    pthread_mutex_lock(&print_lock);
    printf("alloc %llu %zu\n", p, size);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
}

static void say_free(CUdeviceptr p) {
    pthread_mutex_lock(&print_lock);
    printf("free %llu\n", p);
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
}

/* Each thread allocates and frees 200 blocks, keeping a few alive at a time. */
static void *worker(void *arg) {
    size_t base = (size_t)arg;
    CUdeviceptr live[4] = {0, 0, 0, 0};
    for (int i = 0; i < 200; i++) {
        size_t size = 512 * (base + (size_t)i % 7 + 1);
        int slot = i % 4;
        if (live[slot]) {
            cuMemFree_v2(live[slot]);
            say_free(live[slot]);
        }
        if (cuMemAlloc_v2(&live[slot], size) != 0) return (void *)1;
        say_alloc(live[slot], size);
    }
    for (int slot = 0; slot < 4; slot++) {
        cuMemFree_v2(live[slot]);
        say_free(live[slot]);
    }
    return NULL;
}

#include <time.h>
static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, void *);
typedef CUresult (*free_async_fn)(CUdeviceptr, void *);
typedef CUresult (*alloc_pool_fn)(CUdeviceptr *, size_t, void *, void *);
typedef CUresult (*alloc_pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*alloc_managed_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned int);
typedef CUresult (*alloc_host_fn)(void **, size_t);
typedef CUresult (*free_host_fn)(void *);

/* Every other memory function, resolved with cuGetProcAddress (flags 2: per-thread default
 * stream, so the stream-ordered ones are the _ptsz variants) or linked directly. Host memory is
 * printed as "host_alloc ADDR SIZE" / "host_free ADDR". */
static int other_apis(int resolve, unsigned long long flags) {
    void *f[8] = {0};
    const char *names[8] = {"cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuMemAllocPitch",
                            "cuMemAllocManaged", "cuMemHostAlloc", "cuMemAllocHost", "cuMemFreeHost"};
    if (resolve) {
        for (int i = 0; i < 8; i++)
            if (cuGetProcAddress(names[i], &f[i], 12000, flags) != 0) return 9;
    } else {
        void *handle = dlopen(NULL, RTLD_NOW);
        for (int i = 0; i < 8; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", names[i], i == 3 || i == 6 ? "_v2" : "");
            f[i] = dlsym(handle, name);
            if (!f[i]) return 10;
        }
    }
    CUdeviceptr a, b, c, d;
    size_t pitch = 0;
    if (((alloc_async_fn)f[0])(&a, 1 << 16, (void *)0x51) != 0) return 11;
    say_alloc(a, 1 << 16);
    if (((alloc_pool_fn)f[2])(&b, 1 << 17, (void *)0x77, (void *)0x51) != 0) return 12;
    say_alloc(b, 1 << 17);
    if (((alloc_pitch_fn)f[3])(&c, &pitch, 1000, 64, 4) != 0) return 13;
    say_alloc(c, pitch * 64);
    if (((alloc_managed_fn)f[4])(&d, 1 << 18, 1) != 0) return 14;
    say_alloc(d, 1 << 18);
    CUdeviceptr order[4] = {c, a, d, b};
    for (int i = 0; i < 4; i++) {
        if (((free_async_fn)f[1])(order[i], (void *)0x51) != 0) return 15;
        say_free(order[i]);
    }
    void *h1 = NULL, *h2 = NULL;
    if (((host_alloc_fn)f[5])(&h1, 8192, 0) != 0) return 16;
    if (((alloc_host_fn)f[6])(&h2, 4096) != 0) return 17;
    printf("host_alloc %llu 8192\nhost_alloc %llu 4096\n", (unsigned long long)h1, (unsigned long long)h2);
    ((free_host_fn)f[7])(h2);
    ((free_host_fn)f[7])(h1);
    printf("host_free %llu\nhost_free %llu\n", (unsigned long long)h2, (unsigned long long)h1);
    fflush(stdout);
    return 0;
}

CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemRelease(unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuDevicePrimaryCtxReset_v2(int);

/* An expandable segment as PyTorch builds one: reserve addresses, then create and map 2 MiB
 * pages, unmap one; then allocate two plain blocks and reset the primary context, which frees
 * what is still held. Prints "map ADDR SIZE", "unmap ADDR SIZE", "alloc ADDR SIZE", "reset". */
static int virtual_memory(void) {
    CUdeviceptr base;
    const size_t page = 2 << 20;
    if (cuMemAddressReserve(&base, 8 * page, page, 0, 0) != 0) return 20;
    unsigned long long handles[3];
    for (int i = 0; i < 3; i++) {
        if (cuMemCreate(&handles[i], page, NULL, 0) != 0) return 21;
        if (cuMemMap(base + (CUdeviceptr)i * page, page, 0, handles[i], 0) != 0) return 22;
        printf("map %llu %zu\n", base + (CUdeviceptr)i * page, page);
    }
    cuMemUnmap(base + 2 * page, page);
    cuMemRelease(handles[2]);
    printf("unmap %llu %zu\n", base + 2 * page, page);
    CUdeviceptr a, b;
    if (cuMemAlloc_v2(&a, 4096) != 0 || cuMemAlloc_v2(&b, 8192) != 0) return 23;
    printf("alloc %llu 4096\nalloc %llu 8192\n", a, b);
    if (cuDevicePrimaryCtxReset_v2(0) != 0) return 24;
    printf("reset\n");
    fflush(stdout);
    return 0;
}

CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);

/* An allocation on each of the fake driver's two devices, the second after making device 1's
 * context current. Prints "alloc ADDR SIZE DEVICE" / "free ADDR". */
static int two_devices(void) {
    CUdeviceptr a, b;
    void *ctx1 = NULL;
    if (cuMemAlloc_v2(&a, 4096) != 0) return 30;
    printf("alloc %llu 4096 0\n", a);
    cuDevicePrimaryCtxRetain(&ctx1, 1);
    cuCtxSetCurrent(ctx1);
    if (cuMemAlloc_v2(&b, 8192) != 0) return 31;
    printf("alloc %llu 8192 1\n", b);
    cuMemFree_v2(b);
    printf("free %llu\n", b);
    fflush(stdout);
    return 0;
}

/* One block, then this program again as a new process (exec, as subprocess.run and DataLoader
 * workers with the spawn method do), which makes its own calls; its output passes through. */
static int subprocess_case(const char *self) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, 16384) != 0) return 40;
    say_alloc(p, 16384);
    pid_t child = fork();
    if (child == 0) {
        execl(self, self, "direct", (char *)NULL);
        _exit(41);
    }
    int status = 0;
    waitpid(child, &status, 0);
    cuMemFree_v2(p);
    say_free(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 42;
}

CUresult cuMemAllocAsync(CUdeviceptr *, size_t, void *);
CUresult cuMemFreeAsync(CUdeviceptr, void *);
CUresult cuDeviceGetMemPool(void **, int);
CUresult cuMemPoolGetAttribute(void *, int, void *);
CUresult cuMemPoolSetAttribute(void *, int, void *);
CUresult cuMemPoolTrimTo(void *, size_t);
CUresult cuStreamSynchronize(void *);
CUresult cuCtxSynchronize(void);
CUresult cuEventSynchronize(void *);
typedef CUresult (*trim_fn)(void *, size_t);
typedef CUresult (*sync_fn)(void *);
typedef CUresult (*ctx_sync_fn)(void);

/* A stream-ordered pool's life: what it reserves grows with allocations, stays after frees,
 * shrinks at a synchronisation (release threshold 0) or a trim, and stays at synchronisations
 * once the threshold is raised. The pool functions are linked directly or (resolve != 0)
 * resolved with cuGetProcAddress for the per-thread default stream. Prints "alloc ADDR SIZE",
 * "free ADDR" and, after each step that can change it, "reserved BYTES" as the driver says. */
static int pool_life(int resolve) {
    alloc_async_fn alloc = cuMemAllocAsync;
    free_async_fn release = cuMemFreeAsync;
    trim_fn trim = cuMemPoolTrimTo;
    sync_fn stream_sync = cuStreamSynchronize, event_sync = cuEventSynchronize;
    ctx_sync_fn ctx_sync = cuCtxSynchronize;
    if (resolve) {
        void *f[6];
        const char *names[6] = {"cuMemAllocAsync", "cuMemFreeAsync", "cuMemPoolTrimTo",
                                "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize"};
        for (int i = 0; i < 6; i++)
            if (cuGetProcAddress(names[i], &f[i], 12000, 2) != 0) return 50;
        alloc = (alloc_async_fn)f[0];
        release = (free_async_fn)f[1];
        trim = (trim_fn)f[2];
        stream_sync = (sync_fn)f[3];
        event_sync = (sync_fn)f[4];
        ctx_sync = (ctx_sync_fn)f[5];
    }
    void *pool = NULL;
    if (cuDeviceGetMemPool(&pool, 0) != 0) return 51;
    void *stream = (void *)0x51;
#define SAY_RESERVED()                                                    \
    do {                                                                  \
        unsigned long long r = 0;                                         \
        cuMemPoolGetAttribute(pool, 5, &r);                               \
        printf("reserved %llu\n", r);                                     \
    } while (0)
    CUdeviceptr a, b, c;
    if (alloc(&a, 3 << 20, stream) != 0) return 52;
    say_alloc(a, 3 << 20);
    SAY_RESERVED();
    if (alloc(&b, 1 << 20, stream) != 0) return 53;
    say_alloc(b, 1 << 20);
    SAY_RESERVED();
    release(a, stream);
    say_free(a);
    SAY_RESERVED();
    stream_sync(stream);
    SAY_RESERVED();
    unsigned long long never = ~0ull;
    cuMemPoolSetAttribute(pool, 4, &never);
    if (alloc(&c, 5 << 20, stream) != 0) return 54;
    say_alloc(c, 5 << 20);
    SAY_RESERVED();
    release(c, stream);
    say_free(c);
    ctx_sync();
    SAY_RESERVED();
    trim(pool, 0);
    SAY_RESERVED();
    release(b, stream);
    say_free(b);
    event_sync(NULL);
    SAY_RESERVED();
    trim(pool, 0);
    SAY_RESERVED();
#undef SAY_RESERVED
    fflush(stdout);
    return 0;
}

/* "live DIR": a run watched as it goes. Allocates 1 MiB, says DIR/first.ready and waits for
 * DIR/first.go; allocates 3 MiB and forks a child that allocates 2 MiB; says second.ready,
 * waits for second.go; then the child exits and the parent dies by SIGKILL, freeing nothing. */
static void touch(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

static void wait_for(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    while (access(path, F_OK) != 0) usleep(20 * 1000);
}

static int live_run(const char *dir) {
    CUdeviceptr a, b;
    if (cuMemAlloc_v2(&a, 1 << 20) != 0) return 3;
    say_alloc(a, 1 << 20);
    /* Past the hook's flush (20 ms) before saying so. */
    usleep(100 * 1000);
    touch(dir, "first.ready");
    wait_for(dir, "first.go");
    if (cuMemAlloc_v2(&b, 3 << 20) != 0) return 3;
    say_alloc(b, 3 << 20);
    pid_t child = fork();
    if (child == 0) {
        CUdeviceptr c;
        if (cuMemAlloc_v2(&c, 2 << 20) != 0) _exit(3);
        say_alloc(c, 2 << 20);
        usleep(100 * 1000);
        touch(dir, "child.ready");
        wait_for(dir, "second.go");
        _exit(0);
    }
    wait_for(dir, "child.ready");
    touch(dir, "second.ready");
    wait_for(dir, "second.go");
    int status = 0;
    waitpid(child, &status, 0);
    raise(SIGKILL);
    return 4;
}

/* Another program on the device (an inference server, a colleague's notebook): holds `bytes` on
 * device 0 from when it says DIR/hold.ready until DIR/hold.go appears. */
static int hold(const char *dir, const char *bytes) {
    CUdeviceptr p;
    size_t size = (size_t)strtoull(bytes, NULL, 10);
    if (cuMemAlloc_v2(&p, size) != 0) return 3;
    say_alloc(p, size);
    touch(dir, "hold.ready");
    wait_for(dir, "hold.go");
    cuMemFree_v2(p);
    say_free(p);
    return 0;
}

/* A long-running program for the flight recorder: allocates and frees for ever (or `calls`
 * pairs), keeping eight blocks alive in turn, printing each call, and pausing a millisecond every
 * hundred calls so that a kill lands anywhere. */
static int churn(long long calls) {
    CUdeviceptr live[8] = {0};
    for (long long i = 0; calls <= 0 || i < calls; i++) {
        int slot = (int)(i % 8);
        if (live[slot]) {
            cuMemFree_v2(live[slot]);
            say_free(live[slot]);
        }
        size_t size = 4096 * (size_t)(1 + i % 13);
        if (cuMemAlloc_v2(&live[slot], size) != 0) return 3;
        say_alloc(live[slot], size);
        if (i % 100 == 99) usleep(1000);
    }
    return 0;
}

static int hard_case(const char *how) {
    CUdeviceptr p;
    if (strcmp(how, "devices") == 0) return two_devices();
    if (strcmp(how, "pool") == 0) return pool_life(0);
    if (strcmp(how, "pool_proc") == 0) return pool_life(1);
    if (strcmp(how, "vmm") == 0 || strcmp(how, "devices") == 0 ||
        strncmp(how, "pool", 4) == 0) return virtual_memory();
    if (strcmp(how, "others_proc") == 0) return other_apis(1, 2);
    if (strcmp(how, "others_dlsym") == 0) return other_apis(0, 0);
    if (strcmp(how, "bench") == 0) {
        /* The cost of a driver call as the program sees it: best of 5 runs of 100,000
         * alloc/free pairs, in ns per call. */
        long long best = -1;
        for (int run = 0; run < 5; run++) {
            long long start = now_ns();
            for (int i = 0; i < 100000; i++) {
                cuMemAlloc_v2(&p, 512);
                cuMemFree_v2(p);
            }
            long long per_call = (now_ns() - start) / 200000;
            if (best < 0 || per_call < best) best = per_call;
        }
        printf("ns_per_call %lld\n", best);
        return 0;
    }
    if (strcmp(how, "threads") == 0) {
        pthread_t threads[8];
        for (size_t t = 0; t < 8; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
        for (int t = 0; t < 8; t++) pthread_join(threads[t], NULL);
        return 0;
    }
    if (strcmp(how, "fork") == 0) {
        if (cuMemAlloc_v2(&p, 8192) != 0) return 3;
        say_alloc(p, 8192);
        pid_t child = fork();
        if (child == 0) {
            CUdeviceptr q;
            if (cuMemAlloc_v2(&q, 65536) != 0) _exit(3);
            say_alloc(q, 65536);
            cuMemFree_v2(q);
            say_free(q);
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        cuMemFree_v2(p);
        say_free(p);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
    }
    if (strcmp(how, "exit") == 0 || strcmp(how, "kill") == 0) {
        for (int i = 0; i < 3; i++) {
            if (cuMemAlloc_v2(&p, 4096 << i) != 0) return 3;
            say_alloc(p, (size_t)4096 << i);
        }
        /* Gone without freeing and without atexit handlers; killed a while after the last call
         * (the recorder may lose the last ~100 ms, not more). */
        if (strcmp(how, "kill") == 0) {
            usleep(150 * 1000);
            raise(SIGKILL);
        }
        _exit(0);
    }
    return 2;
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "direct";
    if (strcmp(how, "live") == 0 && argc > 2) return live_run(argv[2]);
    if (strcmp(how, "hold") == 0 && argc > 3) return hold(argv[2], argv[3]);
    if (strcmp(how, "churn") == 0) return churn(argc > 2 ? atoll(argv[2]) : 0);
    if (strcmp(how, "subprocess") == 0) return subprocess_case(argv[0]);
    if (strcmp(how, "threads") == 0 || strcmp(how, "fork") == 0 || strcmp(how, "exit") == 0 ||
        strcmp(how, "kill") == 0 || strcmp(how, "bench") == 0 || strncmp(how, "others", 6) == 0 ||
        strcmp(how, "vmm") == 0 || strcmp(how, "devices") == 0 ||
        strncmp(how, "pool", 4) == 0)
        return hard_case(how);
    alloc_fn do_alloc = cuMemAlloc_v2;
    free_fn do_free = cuMemFree_v2;
    if (strcmp(how, "proc") == 0) {
        cuGetProcAddress("cuMemAlloc", (void **)&do_alloc, 12000, 0);
        cuGetProcAddress("cuMemFree", (void **)&do_free, 12000, 0);
    } else if (strcmp(how, "dlsym") == 0 || strcmp(how, "dlsym_proc") == 0) {
        /* As programs that load the driver at run time do: by name, then by handle. */
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!driver) return 6;
        if (strcmp(how, "dlsym") == 0) {
            do_alloc = (alloc_fn)dlsym(driver, "cuMemAlloc_v2");
            do_free = (free_fn)dlsym(driver, "cuMemFree_v2");
        } else {
            typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t);
            proc_fn resolve = (proc_fn)dlsym(driver, "cuGetProcAddress");
            if (!resolve) return 7;
            resolve("cuMemAlloc", (void **)&do_alloc, 12000, 0);
            resolve("cuMemFree", (void **)&do_free, 12000, 0);
        }
        if (!do_alloc || !do_free) return 8;
    } else if (strcmp(how, "proc_v2") == 0) {
        int status = 0;
        cuGetProcAddress_v2("cuMemAlloc", (void **)&do_alloc, 12000, 0, &status);
        cuGetProcAddress_v2("cuMemFree", (void **)&do_free, 12000, 0, &status);
    }
    cuInit(0);
    const size_t sizes[] = {1 << 20, 4096, 3 << 20, 512};
    CUdeviceptr ptrs[4];
    for (int i = 0; i < 4; i++) {
        if (do_alloc(&ptrs[i], sizes[i]) != 0) return 3;
        printf("alloc %llu %zu\n", ptrs[i], sizes[i]);
    }
    /* Free in a different order than allocated. */
    const int order[] = {1, 3, 0, 2};
    for (int i = 0; i < 4; i++) {
        if (do_free(ptrs[order[i]]) != 0) return 4;
        printf("free %llu\n", ptrs[order[i]]);
    }
    /* More than the fake device holds: an OOM. */
    CUdeviceptr big;
    if (do_alloc(&big, (size_t)2 << 30) == 2) printf("oom %zu\n", (size_t)2 << 30);
    fflush(stdout);
    return 0;
}
