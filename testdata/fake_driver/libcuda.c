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
 *
 * Only the entry points a program calls before it knows that no GPU can be used are
 * here: cudarc looks each symbol up when it is first called and panics when it is
 * missing, so a stoker path that calls further into a driver that already failed shows
 * up as a panic in the tests.
 */
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
    if (is("busy")) {
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

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    (void)ctx;
    (void)device;
    if (is("stub")) return STUB_LIBRARY;
    if (!initialized) return NOT_INITIALIZED;
    return DEVICES_UNAVAILABLE;
}

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
