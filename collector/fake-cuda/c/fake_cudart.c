/* A fake CUDA runtime (libcudart.so.12) over the fake driver, for testing. Like the real one it
 * opens the driver privately (RTLD_LOCAL) and reaches it through a private table
 * (cuGetExportTable, found with dlsym) for its memory functions, so the hook must hook the
 * runtime's own cudaMalloc & co.; and it hands out driver functions through cuGetProcAddress in
 * cudaGetDriverEntryPoint(ByVersion). */
#include <dlfcn.h>
#include <stddef.h>

typedef int cudaError_t;
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, int *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

#define RUNTIME_VERSION 12040

typedef CUresult (*export_fn)(const void **, const void *);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, void *);
typedef CUresult (*free_async_fn)(CUdeviceptr, void *);
typedef CUresult (*sync_fn)(void *);
typedef CUresult (*ctx_sync_fn)(void);

/* The driver's private table: cuMemAlloc_v2, cuMemFree_v2, cuMemAllocAsync, cuMemFreeAsync,
 * cuStreamSynchronize, cuCtxSynchronize. */
static void *const *table(void) {
    static void *const *found = NULL;
    if (!found) {
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        export_fn get = driver ? (export_fn)dlsym(driver, "cuGetExportTable") : NULL;
        const void *t = NULL;
        if (get && get(&t, NULL) == 0) found = (void *const *)t;
    }
    return found;
}

static get_proc_fn resolver(void) {
    static get_proc_fn found = NULL;
    if (!found) {
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (driver) found = (get_proc_fn)dlsym(driver, "cuGetProcAddress_v2");
    }
    return found;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags, int *status) {
    get_proc_fn get = resolver();
    if (!get) return 35; /* cudaErrorInsufficientDriver */
    return get(symbol, fn, (int)version, flags, status) == 0 ? 0 : 500;
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags, int *status) {
    return cudaGetDriverEntryPointByVersion(symbol, fn, RUNTIME_VERSION, flags, status);
}

static cudaError_t runtime_error(CUresult r) { return r == 2 ? 2 /* cudaErrorMemoryAllocation */ : r; }

cudaError_t cudaMalloc(void **ptr, size_t size) {
    if (!table()) return 35;
    CUdeviceptr p = 0;
    CUresult r = ((alloc_fn)table()[0])(&p, size);
    *ptr = (void *)p;
    return runtime_error(r);
}

cudaError_t cudaFree(void *ptr) {
    if (!table()) return 35;
    return runtime_error(((free_fn)table()[1])((CUdeviceptr)ptr));
}

cudaError_t cudaMallocAsync(void **ptr, size_t size, void *stream) {
    if (!table()) return 35;
    CUdeviceptr p = 0;
    CUresult r = ((alloc_async_fn)table()[2])(&p, size, stream);
    *ptr = (void *)p;
    return runtime_error(r);
}

cudaError_t cudaFreeAsync(void *ptr, void *stream) {
    if (!table()) return 35;
    return runtime_error(((free_async_fn)table()[3])((CUdeviceptr)ptr, stream));
}

cudaError_t cudaStreamSynchronize(void *stream) {
    if (!table()) return 35;
    return runtime_error(((sync_fn)table()[4])(stream));
}

cudaError_t cudaDeviceSynchronize(void) {
    if (!table()) return 35;
    return runtime_error(((ctx_sync_fn)table()[5])());
}
