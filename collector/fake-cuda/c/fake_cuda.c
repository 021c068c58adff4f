/* A fake CUDA driver (libcuda.so.1) over host memory, for testing vramscope's hooks on machines
 * without a GPU. Test-only: it implements just enough of the driver API for the hooks and the
 * test clients, with the driver's own symbol names, ABI and return codes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef int CUdriverProcAddressQueryResult;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_FOUND 500

/* Capacity of each fake device (1 GiB, or VRAMSCOPE_FAKE_TOTAL_BYTES): allocations past it fail
 * with CUDA_ERROR_OUT_OF_MEMORY. */
static size_t FAKE_TOTAL_BYTES = (size_t)1 << 30;
static size_t fake_used_bytes = 0;

/* Several processes on one device. With VRAMSCOPE_FAKE_GPU_DIR set, each process keeps what it
 * holds on each device in DIR/proc.<pid> ("<device 0> <device 1>\n" in bytes), rewritten under an
 * exclusive lock of DIR/lock at each change, and an allocation fails when what every live process
 * holds on the device, with it, passes the capacity; the fake NVML (fake_nvml.c) reads the same
 * files, as the real one reports per-process memory. A process's first allocation on a device
 * also takes VRAMSCOPE_FAKE_CONTEXT_BYTES (default 0) there: its CUDA context, which the driver
 * accounts to the process but no allocation call shows. A process killed leaves its file; a
 * reader skips the files of processes that are gone, as the driver frees a dead process's
 * memory. */
static char shared_dir[512];
static size_t context_bytes = 0;
static size_t held[2];
static int has_context[2];
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;

static void forget_own_file(void) {
    if (!shared_dir[0]) return;
    char path[600];
    snprintf(path, sizeof path, "%s/proc.%d", shared_dir, (int)getpid());
    unlink(path);
}

__attribute__((constructor)) static void fake_setup(void) {
    const char *total = getenv("VRAMSCOPE_FAKE_TOTAL_BYTES");
    if (total && *total) FAKE_TOTAL_BYTES = (size_t)strtoull(total, NULL, 10);
    const char *context = getenv("VRAMSCOPE_FAKE_CONTEXT_BYTES");
    if (context && *context) context_bytes = (size_t)strtoull(context, NULL, 10);
    const char *dir = getenv("VRAMSCOPE_FAKE_GPU_DIR");
    if (dir && *dir && strlen(dir) < 400) {
        snprintf(shared_dir, sizeof shared_dir, "%s", dir);
        atexit(forget_own_file);
    }
}

/* What the other live processes hold on `device`, from their files. Called under the lock. */
static size_t others_hold(int device) {
    size_t sum = 0;
    DIR *d = opendir(shared_dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = 0;
        if (sscanf(e->d_name, "proc.%d", &pid) != 1 || pid == (int)getpid()) continue;
        if (kill(pid, 0) != 0 && errno == ESRCH) continue;
        char path[800];
        snprintf(path, sizeof path, "%s/%s", shared_dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long long bytes[2] = {0, 0};
        if (fscanf(f, "%llu %llu", &bytes[0], &bytes[1]) == 2 && device >= 0 && device < 2) sum += bytes[device];
        fclose(f);
    }
    closedir(d);
    return sum;
}

static void write_own_file(void) {
    char path[600], text[64];
    snprintf(path, sizeof path, "%s/proc.%d", shared_dir, (int)getpid());
    int n = snprintf(text, sizeof text, "%llu %llu\n", (unsigned long long)held[0], (unsigned long long)held[1]);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t wrote = write(fd, text, (size_t)n);
    (void)wrote;
    close(fd);
}

static int current_device(void);

/* The lock every process on the shared device takes to change its account (-1: not shared, or it
 * cannot be had). Called with `held_lock` held; closing the descriptor releases it. */
static int lock_device(void) {
    if (!shared_dir[0]) return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/lock", shared_dir);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock >= 0) flock(lock, LOCK_EX);
    return lock;
}

/* Takes `bytes` on the current device (with the context at the first time), or fails with
 * CUDA_ERROR_OUT_OF_MEMORY where the device (every process on it) has no room. */
static CUresult take(size_t bytes) {
    int device = current_device();
    pthread_mutex_lock(&held_lock);
    int lock = lock_device();
    size_t extra = has_context[device] ? 0 : context_bytes;
    size_t elsewhere = lock >= 0 ? others_hold(device) : 0;
    size_t mine = lock >= 0 ? held[device] : fake_used_bytes;
    CUresult result = CUDA_SUCCESS;
    if (bytes + extra > FAKE_TOTAL_BYTES || mine + elsewhere > FAKE_TOTAL_BYTES - bytes - extra) {
        result = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        has_context[device] = 1;
        held[device] += bytes + extra;
        fake_used_bytes += bytes;
        if (lock >= 0) write_own_file();
    }
    if (lock >= 0) close(lock);
    pthread_mutex_unlock(&held_lock);
    return result;
}

/* Gives back `bytes` on `device` (-1: the current one); `all` forgets what the device held. */
static void give(size_t bytes, int device, int all) {
    if (device < 0) device = current_device();
    pthread_mutex_lock(&held_lock);
    int lock = lock_device();
    if (all) {
        fake_used_bytes = 0;
        held[device] = 0;
        has_context[device] = 0;
    } else {
        held[device] = held[device] > bytes ? held[device] - bytes : 0;
        fake_used_bytes = fake_used_bytes > bytes ? fake_used_bytes - bytes : 0;
    }
    if (lock >= 0) {
        write_own_file();
        close(lock);
    }
    pthread_mutex_unlock(&held_lock);
}

CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *version) { *version = 12040; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *count) { *count = 2; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal < 0 || ordinal > 1) return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
/* Two devices; a context is its device + 1, current per thread (device 0 when none is). */
static __thread void *current_context = NULL;
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice device) {
    *ctx = (void *)(size_t)(device + 1);
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(void *ctx) { current_context = ctx; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *device) {
    *device = current_context ? (CUdevice)((size_t)current_context - 1) : 0;
    return CUDA_SUCCESS;
}
static int current_device(void) { return current_context ? (int)((size_t)current_context - 1) : 0; }
/* A device's UUID: 16 bytes, "vramscope-fake" and the ordinal (NVML names it GPU-7672616d-...). */
typedef struct { char bytes[16]; } CUuuid;
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) {
    if (device < 0 || device > 1) return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, "vramscope-fake", 14);
    uuid->bytes[14] = 0;
    uuid->bytes[15] = (char)device;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) { return cuDeviceGetUuid(uuid, device); }
CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
    (void)device;
    snprintf(name, (size_t)len, "vramscope fake GPU");
    return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) {
    (void)device;
    *bytes = FAKE_TOTAL_BYTES;
    return CUDA_SUCCESS;
}

/* Each allocation keeps its size just before the pointer handed out, 256-byte aligned. */
#define HEADER 256
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (take(bytesize) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned char *base = NULL;
    if (posix_memalign((void **)&base, HEADER, bytesize + HEADER) != 0) {
        give(bytesize, -1, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(base, &bytesize, sizeof bytesize);
    memset(base + sizeof bytesize, 0, sizeof(unsigned long long)); /* no pool */
    int device = current_device();
    memcpy(base + 2 * sizeof bytesize, &device, sizeof device);
    *dptr = (CUdeviceptr)(base + HEADER);
    return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *base = (unsigned char *)dptr - HEADER;
    size_t size;
    memcpy(&size, base, sizeof size);
    int device = 0;
    memcpy(&device, base + 2 * sizeof size, sizeof device);
    give(size, device, 0);
    free(base);
    return CUDA_SUCCESS;
}
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem) {
    (void)elem;
    size_t p = (width + 511) / 512 * 512;
    CUresult r = cuMemAlloc_v2(dptr, p * height);
    if (r == CUDA_SUCCESS) *pitch = p;
    return r;
}
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    (void)flags;
    return cuMemAlloc_v2(dptr, bytesize);
}
/* Stream-ordered pools. Each device has a default pool, handle 0xF00D0000 + device; a pool handle
 * a program names is created on first use. A pool reserves memory in 2 MiB steps to cover what is
 * in use; a free keeps it; a synchronisation gives back what exceeds the release threshold
 * (attribute 4, default 0) down to what is in use; cuMemPoolTrimTo gives back down to what is in
 * use or the bytes to keep. Blocks live in host memory with the size and pool before them. */
#define POOL_STEP ((size_t)2 << 20)
#define MAX_FAKE_POOLS 8
struct fake_pool { unsigned long long handle; size_t used, reserved; unsigned long long threshold; };
static struct fake_pool fake_pools[MAX_FAKE_POOLS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t round_step(size_t n) { return (n + POOL_STEP - 1) / POOL_STEP * POOL_STEP; }
/* The pool with this handle, created if new; NULL when the table is full. Called locked. */
static struct fake_pool *pool_of(unsigned long long handle) {
    for (int i = 0; i < MAX_FAKE_POOLS; i++)
        if (fake_pools[i].handle == handle) return &fake_pools[i];
    for (int i = 0; i < MAX_FAKE_POOLS; i++)
        if (fake_pools[i].handle == 0) { fake_pools[i].handle = handle; return &fake_pools[i]; }
    return NULL;
}
static void release_pools(void) {
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < MAX_FAKE_POOLS; i++) {
        struct fake_pool *p = &fake_pools[i];
        if (p->handle && p->reserved > p->threshold) {
            size_t keep = round_step(p->used);
            p->reserved = p->threshold > keep ? (size_t)p->threshold : keep;
        }
    }
    pthread_mutex_unlock(&pool_lock);
}
CUresult cuDeviceGetMemPool(void **pool, CUdevice device) {
    *pool = (void *)(size_t)(0xF00D0000ull + (unsigned long long)device);
    return CUDA_SUCCESS;
}
static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytesize, unsigned long long handle) {
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bytesize > FAKE_TOTAL_BYTES) return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned char *base = NULL;
    if (posix_memalign((void **)&base, HEADER, bytesize + HEADER) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(base, &bytesize, sizeof bytesize);
    memcpy(base + sizeof bytesize, &handle, sizeof handle);
    pthread_mutex_lock(&pool_lock);
    struct fake_pool *p = pool_of(handle);
    if (p) {
        p->used += bytesize;
        if (round_step(p->used) > p->reserved) p->reserved = round_step(p->used);
    }
    pthread_mutex_unlock(&pool_lock);
    *dptr = (CUdeviceptr)(base + HEADER);
    return CUDA_SUCCESS;
}
static CUresult pool_free(CUdeviceptr dptr) {
    if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *base = (unsigned char *)dptr - HEADER;
    size_t size;
    unsigned long long handle;
    memcpy(&size, base, sizeof size);
    memcpy(&handle, base + sizeof size, sizeof handle);
    if (handle == 0) return cuMemFree_v2(dptr); /* not from a pool */
    pthread_mutex_lock(&pool_lock);
    struct fake_pool *p = pool_of(handle);
    if (p) p->used -= size;
    pthread_mutex_unlock(&pool_lock);
    free(base);
    return CUDA_SUCCESS;
}
static unsigned long long current_pool(void) {
    CUdevice device;
    cuCtxGetDevice(&device);
    return 0xF00D0000ull + (unsigned long long)device;
}
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, void *stream) { (void)stream; return pool_alloc(dptr, bytesize, current_pool()); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, void *stream) { (void)stream; return pool_alloc(dptr, bytesize, current_pool()); }
CUresult cuMemFreeAsync(CUdeviceptr dptr, void *stream) { (void)stream; return pool_free(dptr); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, void *stream) { (void)stream; return pool_free(dptr); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, void *pool, void *stream) {
    (void)stream;
    return pool_alloc(dptr, bytesize, (unsigned long long)(size_t)pool);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, void *pool, void *stream) {
    (void)stream;
    return pool_alloc(dptr, bytesize, (unsigned long long)(size_t)pool);
}
CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
    pthread_mutex_lock(&pool_lock);
    struct fake_pool *p = pool_of((unsigned long long)(size_t)pool);
    CUresult r = CUDA_SUCCESS;
    if (!p) r = CUDA_ERROR_INVALID_VALUE;
    else if (attr == 4) *(unsigned long long *)value = p->threshold;
    else if (attr == 5) *(unsigned long long *)value = p->reserved;
    else if (attr == 7) *(unsigned long long *)value = p->used;
    else r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&pool_lock);
    return r;
}
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
    if (attr != 4) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct fake_pool *p = pool_of((unsigned long long)(size_t)pool);
    if (p) p->threshold = *(unsigned long long *)value;
    pthread_mutex_unlock(&pool_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
    pthread_mutex_lock(&pool_lock);
    struct fake_pool *p = pool_of((unsigned long long)(size_t)pool);
    if (p && p->reserved > keep) {
        size_t floor = round_step(p->used);
        p->reserved = round_step(keep) > floor ? round_step(keep) : floor;
    }
    pthread_mutex_unlock(&pool_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuCtxSynchronize(void) { release_pools(); return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(void *stream) { (void)stream; release_pools(); return CUDA_SUCCESS; }
CUresult cuStreamSynchronize_ptsz(void *stream) { (void)stream; release_pools(); return CUDA_SUCCESS; }
CUresult cuEventSynchronize(void *event) { (void)event; release_pools(); return CUDA_SUCCESS; }
/* Pinned host memory: plain host memory here. */
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
    (void)flags;
    *pp = malloc(bytesize);
    return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }
CUresult cuMemFreeHost(void *p) { free(p); return CUDA_SUCCESS; }

/* Virtual memory: addresses are reserved from a static arena, physical handles are sizes. */
static unsigned char vm_arena[64 << 20] __attribute__((aligned(1 << 21)));
static size_t vm_next = 0;
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)alignment; (void)addr; (void)flags;
    if (size > sizeof vm_arena - vm_next) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(vm_arena + vm_next);
    vm_next += size;
    return CUDA_SUCCESS;
}
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { (void)ptr; (void)size; return CUDA_SUCCESS; }
CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags) {
    (void)prop; (void)flags;
    if (take(size) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t *h = malloc(sizeof *h);
    if (!h) {
        give(size, -1, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = size;
    *handle = (unsigned long long)h;
    return CUDA_SUCCESS;
}
CUresult cuMemRelease(unsigned long long handle) {
    size_t *h = (size_t *)handle;
    give(*h, -1, 0);
    free(h);
    return CUDA_SUCCESS;
}
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags) {
    (void)ptr; (void)size; (void)offset; (void)handle; (void)flags;
    return CUDA_SUCCESS;
}
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { (void)ptr; (void)size; return CUDA_SUCCESS; }
/* Contexts: one primary context; destroying it forgets the device memory (the host copy leaks,
 * harmless in a test). */
CUresult cuCtxDestroy_v2(void *ctx) {
    give(0, ctx ? (int)((size_t)ctx - 1) : current_device(), 1);
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { give(0, dev, 1); return CUDA_SUCCESS; }

/* The legacy (v1) entry points the resolver hands out for old versions: same behaviour here. */
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) { return cuMemAlloc_v2(dptr, bytesize); }
CUresult cuMemFree(CUdeviceptr dptr) { return cuMemFree_v2(dptr); }

/* A private table, as the real runtime reaches most of the driver (cuGetExportTable): calls made
 * through it pass no exported symbol, so only the runtime's own functions can be hooked. */
static void *const EXPORT_TABLE[] = {(void *)cuMemAlloc_v2, (void *)cuMemFree_v2, (void *)cuMemAllocAsync,
                                     (void *)cuMemFreeAsync, (void *)cuStreamSynchronize, (void *)cuCtxSynchronize};
CUresult cuGetExportTable(const void **table, const void *id) {
    (void)id;
    *table = EXPORT_TABLE;
    return CUDA_SUCCESS;
}

struct entry { const char *name; int min_version; void *fn; };
/* As the real driver does, a base name resolves to the newest variant the caller's version
 * allows: cuMemAlloc -> cuMemAlloc_v2 from CUDA 3.2 on. */
static const struct entry TABLE[] = {
    {"cuInit", 0, (void *)cuInit},
    {"cuDriverGetVersion", 0, (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", 0, (void *)cuDeviceGetCount},
    {"cuDeviceGet", 0, (void *)cuDeviceGet},
    {"cuCtxGetDevice", 0, (void *)cuCtxGetDevice},
    {"cuCtxSetCurrent", 0, (void *)cuCtxSetCurrent},
    {"cuDevicePrimaryCtxRetain", 0, (void *)cuDevicePrimaryCtxRetain},
    {"cuDeviceGetName", 0, (void *)cuDeviceGetName},
    {"cuDeviceTotalMem", 3020, (void *)cuDeviceTotalMem_v2},
    {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2},
    {"cuMemAlloc", 0, (void *)cuMemAlloc},
    {"cuMemFree", 3020, (void *)cuMemFree_v2},
    {"cuMemFree", 0, (void *)cuMemFree},
    {"cuMemAllocPitch", 3020, (void *)cuMemAllocPitch_v2},
    {"cuMemAllocManaged", 0, (void *)cuMemAllocManaged},
    {"cuMemAllocAsync", 0, (void *)cuMemAllocAsync},
    {"cuMemFreeAsync", 0, (void *)cuMemFreeAsync},
    {"cuMemAllocFromPoolAsync", 0, (void *)cuMemAllocFromPoolAsync},
    {"cuDeviceGetMemPool", 0, (void *)cuDeviceGetMemPool},
    {"cuMemPoolGetAttribute", 0, (void *)cuMemPoolGetAttribute},
    {"cuMemPoolSetAttribute", 0, (void *)cuMemPoolSetAttribute},
    {"cuMemPoolTrimTo", 0, (void *)cuMemPoolTrimTo},
    {"cuCtxSynchronize", 0, (void *)cuCtxSynchronize},
    {"cuStreamSynchronize", 0, (void *)cuStreamSynchronize},
    {"cuEventSynchronize", 0, (void *)cuEventSynchronize},
    {"cuMemHostAlloc", 0, (void *)cuMemHostAlloc},
    {"cuMemAllocHost", 3020, (void *)cuMemAllocHost_v2},
    {"cuMemFreeHost", 0, (void *)cuMemFreeHost},
    {"cuMemAddressReserve", 0, (void *)cuMemAddressReserve},
    {"cuMemAddressFree", 0, (void *)cuMemAddressFree},
    {"cuMemCreate", 0, (void *)cuMemCreate},
    {"cuMemRelease", 0, (void *)cuMemRelease},
    {"cuMemMap", 0, (void *)cuMemMap},
    {"cuMemUnmap", 0, (void *)cuMemUnmap},
    {"cuCtxDestroy", 4000, (void *)cuCtxDestroy_v2},
    {"cuDevicePrimaryCtxReset", 11000, (void *)cuDevicePrimaryCtxReset_v2},
};

/* With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the stream-ordered functions resolve to
 * their _ptsz variants, as in the real driver. */
static const struct entry PTSZ_TABLE[] = {
    {"cuMemAllocAsync", 0, (void *)cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 0, (void *)cuMemFreeAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 0, (void *)cuMemAllocFromPoolAsync_ptsz},
    {"cuStreamSynchronize", 0, (void *)cuStreamSynchronize_ptsz},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    if (flags & 2) {
        for (size_t i = 0; i < sizeof PTSZ_TABLE / sizeof PTSZ_TABLE[0]; i++) {
            if (strcmp(PTSZ_TABLE[i].name, symbol) == 0) {
                *pfn = PTSZ_TABLE[i].fn;
                if (status) *status = 0;
                return CUDA_SUCCESS;
            }
        }
    }
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
        if (strcmp(TABLE[i].name, symbol) == 0 && cudaVersion >= TABLE[i].min_version) {
            *pfn = TABLE[i].fn;
            if (status) *status = 0;
            return CUDA_SUCCESS;
        }
    }
    *pfn = NULL;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return CUDA_ERROR_NOT_FOUND;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
