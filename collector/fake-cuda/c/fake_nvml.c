/* A fake NVML (libnvidia-ml.so.1) beside the fake driver, for testing what vramscope samples of a
 * whole device on machines without a GPU. Test-only: the few functions a sampler of memory needs,
 * with NVML's names, ABI and return codes. Each of the fake driver's two devices reports its
 * capacity (VRAMSCOPE_FAKE_TOTAL_BYTES, 1 GiB by default), what is used on it and each process
 * holding memory there, from the files the fake driver keeps in VRAMSCOPE_FAKE_GPU_DIR (see
 * fake_cuda.c): as the real library does, a process counts with everything the driver accounts
 * to it (its context too), and a process that is gone is not listed. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct fake_nvml_device *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
/* nvmlProcessInfo_t of NVML 11 and 12 (the _v2 and _v3 queries). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

struct fake_nvml_device { int index; };
static struct fake_nvml_device devices[2] = {{0}, {1}};
static int initialised = 0;

nvmlReturn_t nvmlInit_v2(void) { initialised = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t result) { return result == NVML_SUCCESS ? "Success" : "Fake NVML error"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "550.00.fake");
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *count = 2;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (index > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    (void)device;
    snprintf(name, length, "vramscope fake GPU");
    return NVML_SUCCESS;
}
/* The fake driver's cuDeviceGetUuid bytes ("vramscope-fake", 0, ordinal), as NVML writes them. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    const unsigned char b[16] = {'v', 'r', 'a', 'm', 's', 'c', 'o', 'p', 'e', '-', 'f', 'a', 'k', 'e', 0,
                                 (unsigned char)device->index};
    snprintf(uuid, length, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return NVML_SUCCESS;
}

static unsigned long long capacity(void) {
    const char *total = getenv("VRAMSCOPE_FAKE_TOTAL_BYTES");
    return total && *total ? strtoull(total, NULL, 10) : 1ull << 30;
}

/* Each live process holding memory on `index`: up to `max` into `out`; returns how many there are. */
static unsigned int processes(int index, nvmlProcessInfo_t *out, unsigned int max) {
    const char *dir = getenv("VRAMSCOPE_FAKE_GPU_DIR");
    if (!dir || !*dir) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    unsigned int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = 0;
        if (sscanf(e->d_name, "proc.%d", &pid) != 1) continue;
        if (kill(pid, 0) != 0 && errno == ESRCH) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long long bytes[2] = {0, 0};
        int read = fscanf(f, "%llu %llu", &bytes[0], &bytes[1]);
        fclose(f);
        if (read != 2 || bytes[index] == 0) continue;
        if (n < max) {
            out[n].pid = (unsigned int)pid;
            out[n].usedGpuMemory = bytes[index];
            out[n].gpuInstanceId = 0xFFFFFFFFu;
            out[n].computeInstanceId = 0xFFFFFFFFu;
        }
        n++;
    }
    closedir(d);
    return n;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    nvmlProcessInfo_t list[256];
    unsigned int n = processes(device->index, list, 256);
    unsigned long long used = 0;
    for (unsigned int i = 0; i < n && i < 256; i++) used += list[i].usedGpuMemory;
    memory->total = capacity();
    memory->used = used;
    memory->free = used < memory->total ? memory->total - used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = processes(device->index, infos, infos ? *count : 0);
    int fits = n <= *count;
    *count = n;
    return fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}
/* A display server's memory: none on the fake device. */
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    (void)device; (void)infos;
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *count = 0;
    return NVML_SUCCESS;
}
