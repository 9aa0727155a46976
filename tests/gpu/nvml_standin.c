/*
 * Stand-in for libnvidia-ml.so.1: the NVML entry points that GPU identity detection calls
 * (nvml-wrapper, and Python's pynvml), three fixed devices with known values, errors on demand.
 * The tests of tests/gpu build it with the system C compiler and put its directory first on
 * LD_LIBRARY_PATH of a real trainer process, which loads it as it would load the driver's.
 *
 * Build:  cc -shared -fPIC -O2 -Wall -Wextra -Wl,-soname,libnvidia-ml.so.1 \
 *            -o libnvidia-ml.so.1 nvml_standin.c
 *
 * Environment read by the stand-in at every call:
 *   NVML_STANDIN_FAIL  comma list of NVML function names that fail, each optionally "=CODE"
 *                      (an nvmlReturn_t number, default 999 NVML_ERROR_UNKNOWN) or "=badutf8"
 *                      (string getters succeed with bytes that are not UTF-8) or
 *                      "=unterminated" (string getters fill the caller's whole buffer with 'X'
 *                      and write no terminating NUL, as a hostile library may), optionally "@N"
 *                      to fail only for device N; e.g. "nvmlDeviceGetSerial=3,nvmlShutdown"
 *   NVML_STANDIN_LOG   file that gets one line per call, "name[ index]" (appended with
 *                      O_APPEND, so several processes may share it)
 *   NVML_STANDIN_DEVICES  number of devices reported (0..3, default 3)
 *
 * Build-time switches that leave one symbol out, for a library that lacks it:
 * -DSTANDIN_NO_MEMORY_V2 (drivers before R510), -DSTANDIN_NO_INIT_WITH_FLAGS,
 * -DSTANDIN_NO_SHUTDOWN (no real driver lacks it; a hostile library).
 * -DSTANDIN_HANG_IN_CONSTRUCTOR: loading the library never returns (its constructor blocks, as
 * a library on a hung NFS mount or a driver stuck in the kernel does).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_UNKNOWN = 999,
};

/* Layouts copied from nvml.h field by field (they are ABI). */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

struct standin_device {
    const char *name, *uuid, *serial, *bus_id;
    unsigned int domain, bus, dev, pci_device_id, pci_subsystem_id;
    int cc_major, cc_minor;
    unsigned long long memory_total;
};
typedef struct standin_device *nvmlDevice_t;

static struct standin_device DEVICES[3] = {
    {"NVIDIA H100 80GB HBM3", "GPU-0b1d2c3e-4f50-6172-8394-a5b6c7d8e9f0",
     "1650123000001", "00000000:18:00.0", 0, 0x18, 0, 0x233010de, 0x16c110de,
     9, 0, 85520809984ULL},
    {"NVIDIA A100-SXM4-40GB", "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809",
     "1562320011222", "00000000:3B:00.0", 0, 0x3b, 0, 0x20b010de, 0x134f10de,
     8, 0, 42949672960ULL},
    {"NVIDIA L40S", "GPU-2c3d4e5f-6071-8293-a4b5-c6d7e8f90a1b",
     "1324021033344", "00000001:86:00.0", 1, 0x86, 0, 0x26b910de, 0x185110de,
     8, 9, 48305799168ULL},
};
static const char DRIVER_VERSION[] = "550.54.15";
static const char BAD_UTF8[] = "\xff\xfe bad \xc3";

static int init_count; /* NVML reference-counts init/shutdown */

#ifdef STANDIN_HANG_IN_CONSTRUCTOR
__attribute__((constructor)) static void never_returns(void)
{
    for (;;)
        sleep(1000);
}
#endif

static void log_call(const char *name, int index)
{
    const char *path = getenv("NVML_STANDIN_LOG");
    if (!path || !*path)
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[160];
    int n = index >= 0 ? snprintf(line, sizeof line, "%s %d\n", name, index)
                       : snprintf(line, sizeof line, "%s\n", name);
    if (n > 0)
        (void)!write(fd, line, (size_t)n);
    close(fd);
}

enum { NO_FAULT = -1, FAULT_BAD_UTF8 = -2, FAULT_UNTERMINATED = -3 };

/* The fault configured for `name` on device `index` (-1: no device). */
static int fault_for(const char *name, int index)
{
    const char *spec = getenv("NVML_STANDIN_FAIL");
    size_t name_len = strlen(name);
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        size_t word = strcspn(spec, "=@,");
        if (word > len)
            word = len;
        if (word == name_len && strncmp(spec, name, name_len) == 0) {
            int code = NVML_ERROR_UNKNOWN, device = -1;
            const char *p = spec + word;
            const char *stop = spec + len;
            while (p < stop) {
                if (*p == '=') {
                    if (strncmp(p + 1, "badutf8", 7) == 0)
                        code = FAULT_BAD_UTF8;
                    else if (strncmp(p + 1, "unterminated", 12) == 0)
                        code = FAULT_UNTERMINATED;
                    else
                        code = atoi(p + 1);
                } else if (*p == '@') {
                    device = atoi(p + 1);
                }
                p++;
                while (p < stop && *p != '=' && *p != '@')
                    p++;
            }
            if (device < 0 || device == index)
                return code;
        }
        spec = end ? end + 1 : NULL;
    }
    return NO_FAULT;
}

static unsigned int device_count(void)
{
    const char *v = getenv("NVML_STANDIN_DEVICES");
    if (!v || !*v)
        return 3;
    int n = atoi(v);
    return n < 0 ? 0 : n > 3 ? 3 : (unsigned int)n;
}

static int device_index(nvmlDevice_t d)
{
    for (unsigned int i = 0; i < device_count(); i++)
        if (d == &DEVICES[i])
            return (int)i;
    return -1;
}

/* Common prologue: log, check init, apply an error fault. */
#define ENTER(name, index)                                       \
    do {                                                         \
        log_call(name, index);                                   \
        if (init_count == 0)                                     \
            return NVML_ERROR_UNINITIALIZED;                     \
        int f_ = fault_for(name, index);                         \
        if (f_ >= 0)                                             \
            return f_;                                           \
    } while (0)

static nvmlReturn_t copy_string(const char *name, int index, const char *value,
                                char *buf, unsigned int length)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fault_for(name, index) == FAULT_UNTERMINATED) {
        memset(buf, 'X', length);
        return NVML_SUCCESS;
    }
    if (fault_for(name, index) == FAULT_BAD_UTF8)
        value = BAD_UTF8;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t do_init(const char *name)
{
    log_call(name, -1);
    int f = fault_for(name, -1);
    if (f >= 0)
        return f;
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }
#ifndef STANDIN_NO_INIT_WITH_FLAGS
nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init("nvmlInitWithFlags");
}
#endif

#ifndef STANDIN_NO_SHUTDOWN
nvmlReturn_t nvmlShutdown(void)
{
    ENTER("nvmlShutdown", -1);
    init_count--;
    return NVML_SUCCESS;
}
#endif

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER("nvmlSystemGetDriverVersion", -1);
    return copy_string("nvmlSystemGetDriverVersion", -1, DRIVER_VERSION, version, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    ENTER("nvmlDeviceGetCount_v2", -1);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (!device || index >= device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &DEVICES[index];
    return NVML_SUCCESS;
}

#define DEVICE_ENTER(name)                                       \
    int i_ = device_index(device);                               \
    ENTER(name, i_);                                             \
    if (i_ < 0)                                                  \
        return NVML_ERROR_INVALID_ARGUMENT;                      \
    const struct standin_device *d_ = &DEVICES[i_]

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_ENTER("nvmlDeviceGetName");
    return copy_string("nvmlDeviceGetName", i_, d_->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_ENTER("nvmlDeviceGetUUID");
    return copy_string("nvmlDeviceGetUUID", i_, d_->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    DEVICE_ENTER("nvmlDeviceGetSerial");
    return copy_string("nvmlDeviceGetSerial", i_, d_->serial, serial, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_ENTER("nvmlDeviceGetPciInfo_v3");
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    const char *bus_id = fault_for("nvmlDeviceGetPciInfo_v3", i_) == FAULT_BAD_UTF8
                             ? BAD_UTF8 : d_->bus_id;
    /* busIdLegacy is "dddd:bb:dd.f" (13 chars) */
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0",
             d_->domain, d_->bus, d_->dev);
    strncpy(pci->busId, bus_id, sizeof pci->busId - 1);
    if (fault_for("nvmlDeviceGetPciInfo_v3", i_) == FAULT_UNTERMINATED)
        memset(pci->busId, 'X', sizeof pci->busId);
    pci->domain = d_->domain;
    pci->bus = d_->bus;
    pci->device = d_->dev;
    pci->pciDeviceId = d_->pci_device_id;
    pci->pciSubSystemId = d_->pci_subsystem_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    DEVICE_ENTER("nvmlDeviceGetCudaComputeCapability");
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = d_->cc_major;
    *minor = d_->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    DEVICE_ENTER("nvmlDeviceGetMemoryInfo");
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = d_->memory_total;
    memory->used = 1ULL << 30;
    memory->free = d_->memory_total - memory->used;
    return NVML_SUCCESS;
}

#ifndef STANDIN_NO_MEMORY_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    DEVICE_ENTER("nvmlDeviceGetMemoryInfo_v2");
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2)
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    memory->total = d_->memory_total;
    memory->reserved = 512ULL << 20;
    memory->used = 1ULL << 30;
    memory->free = d_->memory_total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}
#endif
