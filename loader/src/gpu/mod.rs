//! The GPU path: pinned staging ring, CUDA streams, nvJPEG decode, one fused
//! NVRTC-compiled transform kernel and event hand-off (work in progress).
