// stoker fused transform kernel (compiled at start-up by NVRTC into sm-agnostic PTX).
//
// One thread per output pixel. For every image of a batch it reads the decoded
// HWC u8 pixels, resamples the image's crop box to the output size with an
// antialiased bilinear (triangle) filter -- the same formula as PIL's BILINEAR
// resize with a box, which the CPU path and `kernel::reference_pixel` follow --,
// applies the horizontal flip, normalizes ((v / 255 - mean) / std) and writes
// the result in the requested layout and dtype straight into the batch tensor.
//
// Keep this file free of #include: NVRTC runs without a CUDA toolkit here.

// Must match `kernel::ImageParams` (#[repr(C)], 48 bytes).
struct ImageParams {
    unsigned long long src_offset;  // byte offset of pixel (0, 0) in the source arena
    unsigned int src_width;         // pixels
    unsigned int src_height;        // pixels
    unsigned int src_pitch;         // bytes between rows
    unsigned int src_channels;      // 1 (gray, replicated) or 3 (RGB)
    float crop_x;                   // crop box in source pixels (may be fractional)
    float crop_y;
    float crop_w;
    float crop_h;
    unsigned int flip;              // 1: mirror horizontally
    unsigned int out_index;         // position of the image in the batch tensor
};

// Must match `kernel::TransformArgs` (#[repr(C)]).
struct TransformArgs {
    unsigned int out_width;
    unsigned int out_height;
    unsigned int layout_chw;        // 1: NCHW, 0: NHWC
    unsigned int normalize;         // 1: (v/255 - mean) / std, 0: v/255 (float) or v (u8)
    float mean[3];
    float inv_std[3];
};

#define STOKER_MAX_TAPS 64

__device__ __forceinline__ float stoker_triangle(float x) {
    x = fabsf(x);
    return x < 1.0f ? 1.0f - x : 0.0f;
}

// Computes the taps of one axis (PIL's precompute_coeffs for one output index).
// Returns the first source index in *first and the number of taps; weights sum to 1.
__device__ __forceinline__ int stoker_taps(float box_start, float box_len, unsigned int in_size,
                                           unsigned int out_size, unsigned int out_index,
                                           int *first, float *w) {
    float scale = box_len / (float)out_size;
    float filterscale = scale < 1.0f ? 1.0f : scale;
    float support = filterscale;  // triangle support (1.0) times filterscale
    float center = box_start + ((float)out_index + 0.5f) * scale;
    float inv = 1.0f / filterscale;
    int lo = (int)floorf(center - support + 0.5f);
    int hi = (int)floorf(center + support + 0.5f);
    if (lo < 0) lo = 0;
    if (hi > (int)in_size) hi = (int)in_size;
    int n = hi - lo;
    if (n > STOKER_MAX_TAPS) {
        // Extremely strong downscale: keep the central taps (weights renormalized below).
        int extra = n - STOKER_MAX_TAPS;
        lo += extra / 2;
        n = STOKER_MAX_TAPS;
    }
    if (n < 1) {
        // Box entirely outside the image (cannot happen with validated params): clamp.
        lo = lo >= (int)in_size ? (int)in_size - 1 : (lo < 0 ? 0 : lo);
        n = 1;
        w[0] = 1.0f;
        *first = lo;
        return 1;
    }
    float total = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < n; ++i) {
        float wi = stoker_triangle(((float)(lo + i) - center + 0.5f) * inv);
        w[i] = wi;
        total += wi;
    }
    if (total > 0.0f) {
        float r = 1.0f / total;
        #pragma unroll 1
        for (int i = 0; i < n; ++i) w[i] *= r;
    } else {
        #pragma unroll 1
        for (int i = 0; i < n; ++i) w[i] = 1.0f / (float)n;
    }
    *first = lo;
    return n;
}

// Resamples one output pixel into rgb[3] (values in 0..255, not rounded).
__device__ __forceinline__ void stoker_sample(const unsigned char *__restrict__ arena,
                                              const ImageParams &p, const TransformArgs &a,
                                              unsigned int ox, unsigned int oy, float rgb[3]) {
    // The flip mirrors the output: output column ox shows crop column (W - 1 - ox).
    unsigned int sx = p.flip ? (a.out_width - 1u - ox) : ox;
    float wx[STOKER_MAX_TAPS];
    float wy[STOKER_MAX_TAPS];
    int x0, y0;
    int nx = stoker_taps(p.crop_x, p.crop_w, p.src_width, a.out_width, sx, &x0, wx);
    int ny = stoker_taps(p.crop_y, p.crop_h, p.src_height, a.out_height, oy, &y0, wy);
    const unsigned char *base = arena + p.src_offset;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
    #pragma unroll 1
    for (int j = 0; j < ny; ++j) {
        const unsigned char *row = base + (unsigned long long)(y0 + j) * p.src_pitch;
        float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f;
        if (p.src_channels == 3) {
            #pragma unroll 2
            for (int i = 0; i < nx; ++i) {
                const unsigned char *px = row + (unsigned long long)(x0 + i) * 3u;
                r0 += wx[i] * (float)px[0];
                r1 += wx[i] * (float)px[1];
                r2 += wx[i] * (float)px[2];
            }
        } else {
            #pragma unroll 2
            for (int i = 0; i < nx; ++i) {
                float v = (float)row[x0 + i];
                r0 += wx[i] * v;
            }
            r1 = r0;
            r2 = r0;
        }
        acc0 += wy[j] * r0;
        acc1 += wy[j] * r1;
        acc2 += wy[j] * r2;
    }
    rgb[0] = acc0;
    rgb[1] = acc1;
    rgb[2] = acc2;
}

__device__ __forceinline__ unsigned long long stoker_out_offset(const TransformArgs &a,
                                                               unsigned int n, unsigned int c,
                                                               unsigned int y, unsigned int x) {
    unsigned long long hw = (unsigned long long)a.out_width * a.out_height;
    if (a.layout_chw) {
        return (unsigned long long)n * 3ull * hw + (unsigned long long)c * hw +
               (unsigned long long)y * a.out_width + x;
    }
    return (unsigned long long)n * 3ull * hw + ((unsigned long long)y * a.out_width + x) * 3ull + c;
}

__device__ __forceinline__ float stoker_normalize(const TransformArgs &a, unsigned int c, float v) {
    float u = v * (1.0f / 255.0f);
    return a.normalize ? (u - a.mean[c]) * a.inv_std[c] : u;
}

__device__ __forceinline__ unsigned short stoker_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// grid: (ceil(out_width * out_height / blockDim.x), images), block: (256, 1, 1).
extern "C" __global__ void stoker_transform_u8(const unsigned char *__restrict__ arena,
                                               const ImageParams *__restrict__ params,
                                               TransformArgs a, unsigned char *__restrict__ out) {
    unsigned int pix = blockIdx.x * blockDim.x + threadIdx.x;
    if (pix >= a.out_width * a.out_height) return;
    const ImageParams p = params[blockIdx.y];
    unsigned int ox = pix % a.out_width, oy = pix / a.out_width;
    float rgb[3];
    stoker_sample(arena, p, a, ox, oy, rgb);
    for (unsigned int c = 0; c < 3; ++c) {
        float v = rintf(rgb[c]);
        v = fminf(fmaxf(v, 0.0f), 255.0f);
        out[stoker_out_offset(a, p.out_index, c, oy, ox)] = (unsigned char)v;
    }
}

extern "C" __global__ void stoker_transform_f16(const unsigned char *__restrict__ arena,
                                                const ImageParams *__restrict__ params,
                                                TransformArgs a, unsigned short *__restrict__ out) {
    unsigned int pix = blockIdx.x * blockDim.x + threadIdx.x;
    if (pix >= a.out_width * a.out_height) return;
    const ImageParams p = params[blockIdx.y];
    unsigned int ox = pix % a.out_width, oy = pix / a.out_width;
    float rgb[3];
    stoker_sample(arena, p, a, ox, oy, rgb);
    for (unsigned int c = 0; c < 3; ++c) {
        out[stoker_out_offset(a, p.out_index, c, oy, ox)] =
            stoker_f32_to_f16(stoker_normalize(a, c, rgb[c]));
    }
}

extern "C" __global__ void stoker_transform_f32(const unsigned char *__restrict__ arena,
                                                const ImageParams *__restrict__ params,
                                                TransformArgs a, float *__restrict__ out) {
    unsigned int pix = blockIdx.x * blockDim.x + threadIdx.x;
    if (pix >= a.out_width * a.out_height) return;
    const ImageParams p = params[blockIdx.y];
    unsigned int ox = pix % a.out_width, oy = pix / a.out_width;
    float rgb[3];
    stoker_sample(arena, p, a, ox, oy, rgb);
    for (unsigned int c = 0; c < 3; ++c) {
        out[stoker_out_offset(a, p.out_index, c, oy, ox)] = stoker_normalize(a, c, rgb[c]);
    }
}
