/* A test client of the fake driver: allocates and frees, reaching the driver the way argv[1]
 * says ("direct": linked symbols; "proc": cuGetProcAddress; "proc_v2": cuGetProcAddress_v2),
 * and prints each result as "alloc ADDR SIZE" / "free ADDR" / "oom SIZE" so tests can compare
 * the recorded trace with what happened. */
#include <stdio.h>
#include <string.h>

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

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "direct";
    alloc_fn do_alloc = cuMemAlloc_v2;
    free_fn do_free = cuMemFree_v2;
    if (strcmp(how, "proc") == 0) {
        cuGetProcAddress("cuMemAlloc", (void **)&do_alloc, 12000, 0);
        cuGetProcAddress("cuMemFree", (void **)&do_free, 12000, 0);
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
