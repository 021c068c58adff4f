/* A fake CUDA runtime (libcudart.so.12) over the fake driver, for testing: like the real one it
 * reaches the driver only through cuGetProcAddress (looked up with dlsym), so the hook must see
 * cudaMalloc through the resolver; and it offers cudaGetDriverEntryPoint(ByVersion). */
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

static get_proc_fn resolver(void) {
    static get_proc_fn found = NULL;
    if (!found) {
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
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

cudaError_t cudaMalloc(void **ptr, size_t size) {
    static alloc_fn alloc = NULL;
    if (!alloc && cudaGetDriverEntryPoint("cuMemAlloc", (void **)&alloc, 0, NULL) != 0) return 35;
    CUdeviceptr p = 0;
    CUresult r = alloc(&p, size);
    *ptr = (void *)p;
    return r == 2 ? 2 /* cudaErrorMemoryAllocation */ : r;
}

cudaError_t cudaFree(void *ptr) {
    static free_fn release = NULL;
    if (!release && cudaGetDriverEntryPoint("cuMemFree", (void **)&release, 0, NULL) != 0) return 35;
    return release((CUdeviceptr)ptr);
}
