/* A fake CUDA driver (libcuda.so.1) over host memory, for testing vramscope's hooks on machines
 * without a GPU. Test-only: it implements just enough of the driver API for the hooks and the
 * test clients, with the driver's own symbol names, ABI and return codes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef int CUdriverProcAddressQueryResult;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_FOUND 500

/* Capacity of the fake device: allocations past it fail with CUDA_ERROR_OUT_OF_MEMORY. */
static const size_t FAKE_TOTAL_BYTES = (size_t)1 << 30;
static size_t fake_used_bytes = 0;

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
    if (bytesize > FAKE_TOTAL_BYTES - fake_used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned char *base = NULL;
    if (posix_memalign((void **)&base, HEADER, bytesize + HEADER) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(base, &bytesize, sizeof bytesize);
    __atomic_add_fetch(&fake_used_bytes, bytesize, __ATOMIC_RELAXED);
    *dptr = (CUdeviceptr)(base + HEADER);
    return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *base = (unsigned char *)dptr - HEADER;
    size_t size;
    memcpy(&size, base, sizeof size);
    __atomic_sub_fetch(&fake_used_bytes, size, __ATOMIC_RELAXED);
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
/* Stream-ordered allocation: done at once here (there is no stream to order against). */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, void *stream) { (void)stream; return cuMemAlloc_v2(dptr, bytesize); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, void *stream) { (void)stream; return cuMemAlloc_v2(dptr, bytesize); }
CUresult cuMemFreeAsync(CUdeviceptr dptr, void *stream) { (void)stream; return cuMemFree_v2(dptr); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, void *stream) { (void)stream; return cuMemFree_v2(dptr); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, void *pool, void *stream) {
    (void)pool; (void)stream;
    return cuMemAlloc_v2(dptr, bytesize);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, void *pool, void *stream) {
    (void)pool; (void)stream;
    return cuMemAlloc_v2(dptr, bytesize);
}
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
    if (size > FAKE_TOTAL_BYTES - fake_used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    __atomic_add_fetch(&fake_used_bytes, size, __ATOMIC_RELAXED);
    size_t *h = malloc(sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    *h = size;
    *handle = (unsigned long long)h;
    return CUDA_SUCCESS;
}
CUresult cuMemRelease(unsigned long long handle) {
    size_t *h = (size_t *)handle;
    __atomic_sub_fetch(&fake_used_bytes, *h, __ATOMIC_RELAXED);
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
CUresult cuCtxDestroy_v2(void *ctx) { (void)ctx; fake_used_bytes = 0; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { (void)dev; fake_used_bytes = 0; return CUDA_SUCCESS; }

/* The legacy (v1) entry points the resolver hands out for old versions: same behaviour here. */
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) { return cuMemAlloc_v2(dptr, bytesize); }
CUresult cuMemFree(CUdeviceptr dptr) { return cuMemFree_v2(dptr); }

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
