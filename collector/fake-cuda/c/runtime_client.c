/* A test client of the fake runtime: cudaMalloc/cudaFree (argv[1] "malloc"), the stream-ordered
 * cudaMallocAsync/cudaFreeAsync with synchronisations ("async"), or driver functions found with
 * cudaGetDriverEntryPoint ("entry") or cudaGetDriverEntryPointByVersion ("entry_version").
 * Prints "alloc ADDR SIZE" / "free ADDR". */
#include <stdio.h>
#include <string.h>

typedef int cudaError_t;
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, void *);
cudaError_t cudaFreeAsync(void *, void *);
cudaError_t cudaStreamSynchronize(void *);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetDriverEntryPoint(const char *, void **, unsigned long long, int *);
cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned int, unsigned long long, int *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "malloc";
    const size_t sizes[] = {1 << 20, 12288};
    CUdeviceptr ptrs[2];
    if (strcmp(how, "async") == 0) {
        /* The default pool (release threshold 0): reserves 4 MiB for 3 + 1 MiB, keeps it after
         * the first free until the stream synchronises (2 MiB), and all of it until the device
         * synchronises after the second (0). */
        void *stream = (void *)0x61;
        CUdeviceptr a, b;
        if (cudaMallocAsync((void **)&a, 3 << 20, stream) != 0) return 5;
        printf("alloc %llu %d\n", a, 3 << 20);
        if (cudaMallocAsync((void **)&b, 1 << 20, stream) != 0) return 6;
        printf("alloc %llu %d\n", b, 1 << 20);
        cudaFreeAsync((void *)a, stream);
        printf("free %llu\n", a);
        cudaStreamSynchronize(stream);
        cudaFreeAsync((void *)b, stream);
        printf("free %llu\n", b);
        cudaDeviceSynchronize();
        return 0;
    }
    if (strcmp(how, "malloc") == 0) {
        for (int i = 0; i < 2; i++) {
            if (cudaMalloc((void **)&ptrs[i], sizes[i]) != 0) return 3;
            printf("alloc %llu %zu\n", ptrs[i], sizes[i]);
        }
        for (int i = 0; i < 2; i++) {
            if (cudaFree((void *)ptrs[i]) != 0) return 4;
            printf("free %llu\n", ptrs[i]);
        }
        return 0;
    }
    alloc_fn alloc = NULL;
    free_fn release = NULL;
    int status = 0;
    if (strcmp(how, "entry") == 0) {
        cudaGetDriverEntryPoint("cuMemAlloc", (void **)&alloc, 0, &status);
        cudaGetDriverEntryPoint("cuMemFree", (void **)&release, 0, &status);
    } else {
        cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&alloc, 12000, 0, &status);
        cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&release, 12000, 0, &status);
    }
    if (!alloc || !release) return 5;
    for (int i = 0; i < 2; i++) {
        if (alloc(&ptrs[i], sizes[i]) != 0) return 6;
        printf("alloc %llu %zu\n", ptrs[i], sizes[i]);
    }
    for (int i = 1; i >= 0; i--) {
        if (release(ptrs[i]) != 0) return 7;
        printf("free %llu\n", ptrs[i]);
    }
    return 0;
}
