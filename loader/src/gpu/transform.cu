// stoker fused transform kernel (compiled at start-up by NVRTC into sm-agnostic PTX).
//
// One thread per output pixel. For every image of a batch it reads the decoded
// HWC u8 pixels, resamples the image's crop box to the output size with an
// antialiased bilinear (triangle) filter -- the same formula as PIL's BILINEAR
// resize of the cropped image, which the CPU path (fast_image_resize) computes and
// `kernel::reference` mirrors --,
// applies the horizontal flip, rounds to a u8 level, normalizes
// ((level / 255 - mean) / std) and writes
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
    unsigned int normalize;         // 1: (v/255 - mean) / std, 0: v/255 (float outputs)
    float mean[3];
    float std[3];
};

#define STOKER_MAX_TAPS 64

// Computes the taps of one axis (fast_image_resize's / PIL's precompute_coeffs for
// one output index), restricted to the crop box: pixels outside the box are never
// read, as when the cropped image is resized on its own (the CPU path, torchvision).
// Returns the first source index in *first and the number of taps; weights sum to 1.
__device__ __forceinline__ int stoker_taps(float box_start, float box_len, unsigned int in_size,
                                           unsigned int out_size, unsigned int out_index,
                                           int *first, float *w) {
    float scale = box_len / (float)out_size;
    float filterscale = scale < 1.0f ? 1.0f : scale;
    float support = filterscale;  // triangle support (1.0) times filterscale
    float center = box_start + ((float)out_index + 0.5f) * scale;
    int box_lo = (int)floorf(box_start);
    int box_hi = (int)ceilf(box_start + box_len);
    if (box_lo < 0) box_lo = 0;
    if (box_hi > (int)in_size) box_hi = (int)in_size;
    int lo = (int)floorf(center - support);
    int hi = (int)ceilf(center + support);
    if (lo < box_lo) lo = box_lo;
    if (hi > box_hi) hi = box_hi;
    int n = hi - lo;
    if (n > STOKER_MAX_TAPS) {
        // Extremely strong downscale: keep the central taps (weights renormalized below).
        int extra = n - STOKER_MAX_TAPS;
        lo += extra / 2;
        n = STOKER_MAX_TAPS;
    }
    if (n < 1) {
        // Degenerate box (cannot happen with validated params): nearest pixel.
        lo = lo >= (int)in_size ? (int)in_size - 1 : (lo < 0 ? 0 : lo);
        w[0] = 1.0f;
        *first = lo;
        return 1;
    }
    float total = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < n; ++i) {
        float x = fabsf(((float)(lo + i) + 0.5f - center) / filterscale);
        float wi = x < 1.0f ? 1.0f - x : 0.0f;
        w[i] = wi;
        total += wi;
    }
    if (total > 0.0f) {
        #pragma unroll 1
        for (int i = 0; i < n; ++i) w[i] = w[i] / total;
    } else {
        #pragma unroll 1
        for (int i = 0; i < n; ++i) w[i] = 1.0f / (float)n;
    }
    *first = lo;
    return n;
}

// The u8 level of a resampled value: round half to even, clamp to 0..255.
__device__ __forceinline__ float stoker_level(float v) {
    return fminf(fmaxf(rintf(v), 0.0f), 255.0f);
}

// Resamples one output pixel into rgb[3] (0..255, not yet rounded). Separable like
// the CPU path: the vertical pass first, rounded to u8 levels, then the horizontal
// pass -- the order fast_image_resize uses for u8 images.
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
    const unsigned char *base = arena + p.src_offset + (unsigned long long)y0 * p.src_pitch;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < nx; ++i) {
        float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f;
        if (p.src_channels == 3) {
            const unsigned char *col = base + (unsigned long long)(x0 + i) * 3u;
            #pragma unroll 2
            for (int j = 0; j < ny; ++j) {
                const unsigned char *px = col + (unsigned long long)j * p.src_pitch;
                c0 += wy[j] * (float)px[0];
                c1 += wy[j] * (float)px[1];
                c2 += wy[j] * (float)px[2];
            }
            c0 = stoker_level(c0);
            c1 = stoker_level(c1);
            c2 = stoker_level(c2);
        } else {
            const unsigned char *col = base + (unsigned long long)(x0 + i);
            #pragma unroll 2
            for (int j = 0; j < ny; ++j) {
                c0 += wy[j] * (float)col[(unsigned long long)j * p.src_pitch];
            }
            c0 = stoker_level(c0);
            c1 = c0;
            c2 = c0;
        }
        acc0 += wx[i] * c0;
        acc1 += wx[i] * c1;
        acc2 += wx[i] * c2;
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

// The resampled value is rounded to a u8 level first, exactly like the CPU path
// (which resizes in u8 and then normalizes), so both paths agree whenever the
// resampled level does.

__device__ __forceinline__ float stoker_normalize(const TransformArgs &a, unsigned int c, float v) {
    float u = stoker_level(v) / 255.0f;
    return a.normalize ? (u - a.mean[c]) / a.std[c] : u;
}

__device__ __forceinline__ unsigned short stoker_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// bfloat16 by integer rounding rather than `cvt.rn.bf16.f32`, which PTX has only from
// sm_80 on: the module is compiled for no particular GPU. Round to nearest even on the
// f32 bits, NaN kept quiet, as the CPU path (`half::bf16::from_f32`) and PyTorch round.
__device__ __forceinline__ unsigned short stoker_f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// What each entry point writes for one channel value: the u8 level, or the normalized value
// in its float type.
struct StokerToU8 {
    __device__ static unsigned char of(const TransformArgs &, unsigned int, float v) {
        return (unsigned char)stoker_level(v);
    }
};
struct StokerToF16 {
    __device__ static unsigned short of(const TransformArgs &a, unsigned int c, float v) {
        return stoker_f32_to_f16(stoker_normalize(a, c, v));
    }
};
struct StokerToF32 {
    __device__ static float of(const TransformArgs &a, unsigned int c, float v) {
        return stoker_normalize(a, c, v);
    }
};
struct StokerToBf16 {
    __device__ static unsigned short of(const TransformArgs &a, unsigned int c, float v) {
        return stoker_f32_to_bf16(stoker_normalize(a, c, v));
    }
};

// One output pixel of one image per thread, its three channels written as `To` says.
template <typename To, typename Out>
__device__ __forceinline__ void stoker_transform(const unsigned char *__restrict__ arena,
                                                 const ImageParams *__restrict__ params,
                                                 const TransformArgs &a, Out *__restrict__ out) {
    unsigned int pix = blockIdx.x * blockDim.x + threadIdx.x;
    if (pix >= a.out_width * a.out_height) return;
    const ImageParams p = params[blockIdx.y];
    unsigned int ox = pix % a.out_width, oy = pix / a.out_width;
    float rgb[3];
    stoker_sample(arena, p, a, ox, oy, rgb);
    for (unsigned int c = 0; c < 3; ++c) {
        out[stoker_out_offset(a, p.out_index, c, oy, ox)] = To::of(a, c, rgb[c]);
    }
}

// grid: (ceil(out_width * out_height / blockDim.x), images), block: (256, 1, 1).
extern "C" __global__ void stoker_transform_u8(const unsigned char *__restrict__ arena,
                                               const ImageParams *__restrict__ params,
                                               TransformArgs a, unsigned char *__restrict__ out) {
    stoker_transform<StokerToU8>(arena, params, a, out);
}

extern "C" __global__ void stoker_transform_f16(const unsigned char *__restrict__ arena,
                                                const ImageParams *__restrict__ params,
                                                TransformArgs a, unsigned short *__restrict__ out) {
    stoker_transform<StokerToF16>(arena, params, a, out);
}

extern "C" __global__ void stoker_transform_f32(const unsigned char *__restrict__ arena,
                                                const ImageParams *__restrict__ params,
                                                TransformArgs a, float *__restrict__ out) {
    stoker_transform<StokerToF32>(arena, params, a, out);
}

extern "C" __global__ void stoker_transform_bf16(const unsigned char *__restrict__ arena,
                                                 const ImageParams *__restrict__ params,
                                                 TransformArgs a, unsigned short *__restrict__ out) {
    stoker_transform<StokerToBf16>(arena, params, a, out);
}
