//! Which backend decoded an image, and counters per backend.

use std::sync::atomic::{AtomicU64, Ordering};

/// The backend that produced an image's pixels. Serialized as its
/// [`name`](Route::name), the name the CLI, the logs and the counters print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Route {
    /// CPU, zune-jpeg: ordinary interleaved baseline and progressive files.
    CpuZune,
    /// CPU, jpeg-decoder: multi-scan sequential files, nonstandard sampling,
    /// malformed APP14, and whatever zune-jpeg rejects.
    CpuFallback,
    /// nvJPEG hardware JPEG engines (batched).
    NvjpegHardware,
    /// nvJPEG CUDA decoder (hybrid or GPU-hybrid backend).
    NvjpegCuda,
    /// CPU decode of a hardware-decodable image that
    /// [`GpuDecoderOptions::cpu_share`](crate::GpuDecoderOptions::cpu_share)
    /// gave to the CPUs to run beside the hardware engines (zune-jpeg, or
    /// jpeg-decoder when zune-jpeg fails), pixels copied from pinned staging.
    CpuShare,
    /// nvJPEG's GPU-hybrid backend, batched (Huffman decoding on the GPU's SMs),
    /// for the hardware-decodable images that
    /// [`GpuDecoderOptions::gpu_huffman_share`](crate::GpuDecoderOptions::gpu_huffman_share)
    /// gives it beside the hardware engines.
    NvjpegGpuHuffman,
    /// CPU decode of an image the CUDA decoder would have taken (a progressive
    /// file, or one the engines refuse) that
    /// [`GpuDecoderOptions::cpu_offload`](crate::GpuDecoderOptions::cpu_offload)
    /// moved to the CPU share's threads, to run beside the engines; pixels
    /// copied from pinned staging.
    CpuOffload,
}

impl Route {
    /// Every route, in display order.
    pub const ALL: [Route; 7] = [
        Route::CpuZune,
        Route::CpuFallback,
        Route::NvjpegHardware,
        Route::NvjpegCuda,
        Route::CpuShare,
        Route::NvjpegGpuHuffman,
        Route::CpuOffload,
    ];

    /// Stable short name (`cpu-zune`, `cpu-fallback`, `nvjpeg-hw`,
    /// `nvjpeg-cuda`, `cpu-share`, `nvjpeg-gpu-huffman`, `cpu-offload`).
    pub fn name(self) -> &'static str {
        match self {
            Route::CpuZune => "cpu-zune",
            Route::CpuFallback => "cpu-fallback",
            Route::NvjpegHardware => "nvjpeg-hw",
            Route::NvjpegCuda => "nvjpeg-cuda",
            Route::CpuShare => "cpu-share",
            Route::NvjpegGpuHuffman => "nvjpeg-gpu-huffman",
            Route::CpuOffload => "cpu-offload",
        }
    }

    /// True for the GPU routes.
    pub fn is_gpu(self) -> bool {
        matches!(
            self,
            Route::NvjpegHardware | Route::NvjpegCuda | Route::NvjpegGpuHuffman
        )
    }

    fn index(self) -> usize {
        match self {
            Route::CpuZune => 0,
            Route::CpuFallback => 1,
            Route::NvjpegHardware => 2,
            Route::NvjpegCuda => 3,
            Route::CpuShare => 4,
            Route::NvjpegGpuHuffman => 5,
            Route::CpuOffload => 6,
        }
    }
}

impl serde::Serialize for Route {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Thread-safe counters: images decoded per route, and failures.
///
/// # Examples
/// ```
/// use stoker_decode::{Route, RouteCounters};
/// let c = RouteCounters::default();
/// c.record(Route::CpuZune);
/// c.record_failure();
/// let s = c.snapshot();
/// assert_eq!(s.get(Route::CpuZune), 1);
/// assert_eq!(s.failed, 1);
/// ```
#[derive(Debug, Default)]
pub struct RouteCounters {
    routes: [AtomicU64; Route::ALL.len()],
    failed: AtomicU64,
}

impl RouteCounters {
    /// Counts one image decoded by `route`.
    pub fn record(&self, route: Route) {
        self.routes[route.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one image that failed on every route.
    pub fn record_failure(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> RouteCounts {
        RouteCounts {
            routes: std::array::from_fn(|i| self.routes[i].load(Ordering::Relaxed)),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of [`RouteCounters`]. `Debug` and `serde` name each route as
/// [`Route::name`] does (`{"cpu-zune": 3, ..., "failed": 0}`), not by its place in a list.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCounts {
    routes: [u64; Route::ALL.len()],
    /// Images that failed on every route.
    pub failed: u64,
}

impl RouteCounts {
    /// Images decoded by `route`.
    pub fn get(&self, route: Route) -> u64 {
        self.routes[route.index()]
    }

    /// Images decoded by any route.
    pub fn decoded(&self) -> u64 {
        self.routes.iter().sum()
    }
}

impl std::fmt::Debug for RouteCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("RouteCounts");
        for r in Route::ALL {
            s.field(r.name(), &self.get(r));
        }
        s.field("failed", &self.failed).finish()
    }
}

impl serde::Serialize for RouteCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = serializer.serialize_map(Some(Route::ALL.len() + 1))?;
        for r in Route::ALL {
            m.serialize_entry(r.name(), &self.get(r))?;
        }
        m.serialize_entry("failed", &self.failed)?;
        m.end()
    }
}

impl std::fmt::Display for RouteCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for r in Route::ALL {
            write!(f, "{}={} ", r.name(), self.get(r))?;
        }
        write!(f, "failed={}", self.failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_named_by_route_in_debug_and_json() {
        let c = RouteCounters::default();
        c.record(Route::CpuZune);
        c.record(Route::CpuZune);
        c.record(Route::NvjpegHardware);
        c.record_failure();
        let counts = c.snapshot();
        let json = serde_json::to_value(counts).unwrap();
        assert_eq!(json[Route::CpuZune.name()], 2, "{json}");
        assert_eq!(json[Route::NvjpegHardware.name()], 1, "{json}");
        assert_eq!(json[Route::CpuFallback.name()], 0, "{json}");
        assert_eq!(json["failed"], 1, "{json}");
        assert_eq!(json.as_object().unwrap().len(), Route::ALL.len() + 1);
        let debug = format!("{counts:?}");
        let zune = format!("{}: 2", Route::CpuZune.name());
        assert!(
            debug.starts_with("RouteCounts {") && debug.contains(&zune),
            "{debug}"
        );
    }
}
