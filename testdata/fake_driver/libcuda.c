/*
 * A stand-in for the NVIDIA driver library (libcuda.so), for the tests of what stoker
 * does on machines where the driver library loads but no GPU can be used. Those
 * machines are common: a container with the driver's libraries mounted and no device
 * passed through, an image built with the CUDA toolkit's stub libcuda on the library
 * path, a GPU that another process holds in exclusive mode. None of them can be
 * reproduced on a machine without a GPU otherwise.
 *
 * Built by stoker_testdata::fake_driver with the system C compiler; a test puts its
 * folder first on LD_LIBRARY_PATH of a child process. STOKER_FAKE_CUDA chooses what the
 * driver says:
 *   no-device  cuInit fails with CUDA_ERROR_NO_DEVICE (driver present, no GPU)
 *   stub       every call fails with CUDA_ERROR_STUB_LIBRARY (the toolkit's stub)
 *   busy       one device, whose context cannot be made: CUDA_ERROR_DEVICES_UNAVAILABLE
 *              (exclusive-process mode, held by another process)
 *   incomplete built with -DSTOKER_FAKE_INCOMPLETE: a library that lacks most entry
 *              points (a partial copy, a look-alike), whose cuInit succeeds and reports
 *              one device; stoker must refuse it before any call
 *
 * Like every real driver library (the toolkit's stub included), the complete build
 * exports each entry point stoker looks up before its first call
 * (stoker_decode::DRIVER_ENTRY_POINTS). Only those a program calls before it knows that
 * no GPU can be used do anything; the others abort the process, so a stoker path that
 * calls further into a driver that already failed fails the tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;

enum {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    NOT_INITIALIZED = 3,
    STUB_LIBRARY = 34,
    DEVICES_UNAVAILABLE = 46,
    NO_DEVICE = 100,
    INVALID_DEVICE = 101,
};

static const char *mode(void) {
    const char *m = getenv("STOKER_FAKE_CUDA");
    return m ? m : "no-device";
}

static int is(const char *m) { return strcmp(mode(), m) == 0; }

static int initialized = 0;

CUresult cuInit(unsigned int flags) {
    (void)flags;
    if (is("stub")) return STUB_LIBRARY;
    if (is("busy") || is("incomplete")) {
        initialized = 1;
        return SUCCESS;
    }
    return NO_DEVICE;
}

CUresult cuDriverGetVersion(int *version) {
    if (is("stub")) return STUB_LIBRARY;
    if (!version) return INVALID_VALUE;
    *version = 13000;
    return SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (is("stub")) return STUB_LIBRARY;
    if (!initialized) return NOT_INITIALIZED;
    if (!count) return INVALID_VALUE;
    *count = 1;
    return SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (is("stub")) return STUB_LIBRARY;
    if (!initialized) return NOT_INITIALIZED;
    if (!device) return INVALID_VALUE;
    if (ordinal != 0) return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}

#ifndef STOKER_FAKE_INCOMPLETE
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    (void)ctx;
    (void)device;
    if (is("stub")) return STUB_LIBRARY;
    if (!initialized) return NOT_INITIALIZED;
    return DEVICES_UNAVAILABLE;
}
#endif

static const char *name_of(CUresult e) {
    switch (e) {
    case SUCCESS: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case DEVICES_UNAVAILABLE: return "CUDA_ERROR_DEVICES_UNAVAILABLE";
    case NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    default: return 0;
    }
}

/* The driver's own wording for these codes. */
static const char *text_of(CUresult e) {
    switch (e) {
    case SUCCESS: return "no error";
    case INVALID_VALUE: return "invalid argument";
    case NOT_INITIALIZED: return "initialization error";
    case STUB_LIBRARY: return "CUDA driver is a stub library";
    case DEVICES_UNAVAILABLE: return "CUDA-capable device(s) is/are busy or unavailable";
    case NO_DEVICE: return "no CUDA-capable device is detected";
    case INVALID_DEVICE: return "invalid device ordinal";
    default: return 0;
    }
}

CUresult cuGetErrorName(CUresult error, const char **out) {
    const char *s = name_of(error);
    if (!out || !s) return INVALID_VALUE;
    *out = s;
    return SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **out) {
    const char *s = text_of(error);
    if (!out || !s) return INVALID_VALUE;
    *out = s;
    return SUCCESS;
}

#ifndef STOKER_FAKE_INCOMPLETE
/* The rest of stoker_decode::DRIVER_ENTRY_POINTS: exported, never to be called. (The
 * arguments are not read, so one signature serves them all.) */
#define NOT_CALLED(name)                                                              \
    CUresult name(void) {                                                             \
        fprintf(stderr, "stand-in driver: %s called after the driver failed\n", #name); \
        abort();                                                                      \
    }
NOT_CALLED(cuDeviceGetAttribute)
NOT_CALLED(cuDeviceGetName)
NOT_CALLED(cuDeviceGetPCIBusId)
NOT_CALLED(cuDeviceTotalMem_v2)
NOT_CALLED(cuDevicePrimaryCtxRelease_v2)
NOT_CALLED(cuCtxGetCurrent)
NOT_CALLED(cuCtxSetCurrent)
NOT_CALLED(cuCtxSynchronize)
NOT_CALLED(cuCtxGetStreamPriorityRange)
NOT_CALLED(cuStreamCreate)
NOT_CALLED(cuStreamCreateWithPriority)
NOT_CALLED(cuStreamDestroy_v2)
NOT_CALLED(cuStreamSynchronize)
NOT_CALLED(cuStreamWaitEvent)
NOT_CALLED(cuEventCreate)
NOT_CALLED(cuEventDestroy_v2)
NOT_CALLED(cuEventQuery)
NOT_CALLED(cuEventRecord)
NOT_CALLED(cuEventSynchronize)
NOT_CALLED(cuMemAlloc_v2)
NOT_CALLED(cuMemAllocAsync)
NOT_CALLED(cuMemFree_v2)
NOT_CALLED(cuMemFreeAsync)
NOT_CALLED(cuMemGetInfo_v2)
NOT_CALLED(cuMemHostAlloc)
NOT_CALLED(cuMemFreeHost)
NOT_CALLED(cuMemHostRegister_v2)
NOT_CALLED(cuMemHostUnregister)
NOT_CALLED(cuMemcpyHtoDAsync_v2)
NOT_CALLED(cuMemcpyDtoHAsync_v2)
NOT_CALLED(cuMemcpyDtoDAsync_v2)
NOT_CALLED(cuMemsetD8Async)
NOT_CALLED(cuModuleLoadData)
NOT_CALLED(cuModuleGetFunction)
NOT_CALLED(cuModuleUnload)
NOT_CALLED(cuLaunchKernel)
#endif
