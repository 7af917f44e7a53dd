//! Where [`GpuDecoder::decode_batch`](crate::GpuDecoder::decode_batch) spends
//! its wall-clock time, phase by phase, summed over calls.
//!
//! One `Instant::now()` pair per phase and per hardware lane, never per image:
//! cheap enough to stay on in the hot path.

/// Cumulative wall-clock seconds per phase of `GpuDecoder::decode_batch`, and
/// how many calls and images they cover. Read it with
/// [`GpuDecoder::timings`](crate::GpuDecoder::timings), clear it with
/// [`GpuDecoder::reset_timings`](crate::GpuDecoder::reset_timings).
///
/// Phases run one after another on the calling thread except where noted:
/// the hardware lanes run in parallel (the `hw_lane_*` fields sum over
/// lanes, so they can exceed `hw_lanes_s`), and the CPU share runs on its own
/// thread while the engines decode (`cpu_share_s` overlaps `hw_lanes_s`).
///
/// # Examples
/// ```
/// use stoker_decode::DecodeTimings;
/// let mut t = DecodeTimings::default();
/// t += DecodeTimings { calls: 1, images: 256, total_s: 0.0128, ..DecodeTimings::default() };
/// assert_eq!(t.images, 256);
/// assert!((t.host_us_per_image() - 50.0).abs() < 1e-9);
/// println!("{t}");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DecodeTimings {
    /// `decode_batch` calls covered.
    pub calls: u64,
    /// Images passed to those calls (every route, failures included).
    pub images: u64,
    /// Step 1: header probe, output-size check, `nvjpegJpegStreamParseHeader` +
    /// `nvjpegDecodeBatchedSupported` for hardware candidates, and routing.
    pub probe_s: f64,
    /// Host waits before nvJPEG's batched decodes write: for work queued
    /// earlier on the caller's stream (the hardware batched decode writes when
    /// it is called, not in stream order: see
    /// [`GpuDecoder::decode_batch`](crate::GpuDecoder::decode_batch)), and,
    /// summed over lanes, for a decoder state's previous batch to finish.
    #[serde(default)]
    pub stream_wait_s: f64,
    /// Waiting for a pinned staging buffer of the hardware path (the event of
    /// the batch before last) and growing it.
    pub staging_wait_s: f64,
    /// Copying bitstreams into pinned staging, summed over lanes (each lane
    /// copies its own chunk on its own thread).
    pub staging_copy_s: f64,
    /// Wall time of the hardware lanes (the scoped section: spawn to join).
    pub hw_lanes_s: f64,
    /// Time inside `nvjpegDecodeBatchedInitialize`, summed over lanes.
    pub hw_init_s: f64,
    /// Time inside `nvjpegDecodeBatched` (host side: parsing, submission and
    /// whatever waiting the library does), summed over lanes.
    pub hw_decode_s: f64,
    /// The busiest lane's time (copy + initialize + decode) per call, summed
    /// over calls; against `hw_lanes_s` it shows thread start/join overhead,
    /// against `hw_decode_s / lanes` the imbalance between lanes.
    pub hw_lane_max_s: f64,
    /// The CUDA (hybrid) path: host phases, transfers and device phases queued.
    pub cuda_s: f64,
    /// The CPU path for what nvJPEG rejects or fails on, with its copies queued
    /// (what it rejects from the start is decoded beside the engines: that part
    /// overlaps `hw_lanes_s`).
    pub cpu_s: f64,
    /// The CPU share's decode on its own thread (overlaps the lanes).
    pub cpu_share_s: f64,
    /// The GPU-Huffman share's `nvjpegDecodeBatched` (and initialize) on its
    /// own thread (overlaps the lanes; see
    /// [`GpuDecoderOptions::gpu_huffman_share`](crate::GpuDecoderOptions::gpu_huffman_share)).
    #[serde(default)]
    pub gpu_huffman_s: f64,
    /// Whole `decode_batch` calls.
    pub total_s: f64,
}

impl DecodeTimings {
    /// Host wall time of `decode_batch` per image, in microseconds (0 with no images).
    ///
    /// # Examples
    /// ```
    /// assert_eq!(stoker_decode::DecodeTimings::default().host_us_per_image(), 0.0);
    /// ```
    pub fn host_us_per_image(&self) -> f64 {
        if self.images == 0 {
            0.0
        } else {
            self.total_s * 1e6 / self.images as f64
        }
    }

    /// Images per second of `decode_batch` wall time (0 when nothing was timed).
    ///
    /// # Examples
    /// ```
    /// let t = stoker_decode::DecodeTimings { images: 100, total_s: 0.01, ..Default::default() };
    /// assert!((t.images_per_second() - 10_000.0).abs() < 1e-6);
    /// ```
    pub fn images_per_second(&self) -> f64 {
        if self.total_s > 0.0 {
            self.images as f64 / self.total_s
        } else {
            0.0
        }
    }
}

impl std::ops::AddAssign for DecodeTimings {
    fn add_assign(&mut self, o: DecodeTimings) {
        self.calls += o.calls;
        self.images += o.images;
        self.probe_s += o.probe_s;
        self.stream_wait_s += o.stream_wait_s;
        self.staging_wait_s += o.staging_wait_s;
        self.staging_copy_s += o.staging_copy_s;
        self.hw_lanes_s += o.hw_lanes_s;
        self.hw_init_s += o.hw_init_s;
        self.hw_decode_s += o.hw_decode_s;
        self.hw_lane_max_s += o.hw_lane_max_s;
        self.cuda_s += o.cuda_s;
        self.cpu_s += o.cpu_s;
        self.cpu_share_s += o.cpu_share_s;
        self.gpu_huffman_s += o.gpu_huffman_s;
        self.total_s += o.total_s;
    }
}

impl std::fmt::Display for DecodeTimings {
    /// One line: totals, then each phase in seconds and, in brackets, its
    /// share of the total wall time.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = |s: f64| {
            if self.total_s > 0.0 {
                100.0 * s / self.total_s
            } else {
                0.0
            }
        };
        write!(
            f,
            "calls {} images {} total {:.3}s ({:.1} us/img)",
            self.calls,
            self.images,
            self.total_s,
            self.host_us_per_image()
        )?;
        for (name, s) in [
            ("probe", self.probe_s),
            ("stream_wait", self.stream_wait_s),
            ("staging_wait", self.staging_wait_s),
            ("lanes", self.hw_lanes_s),
            ("lane_max", self.hw_lane_max_s),
            ("cuda", self.cuda_s),
            ("cpu", self.cpu_s),
        ] {
            write!(f, "; {name} {s:.3}s ({:.0}%)", pct(s))?;
        }
        // Sums over lanes or overlapping threads: no share of the wall time.
        write!(
            f,
            "; lane sums: copy {:.3}s init {:.3}s decode {:.3}s; cpu_share {:.3}s; gpu_huffman {:.3}s",
            self.staging_copy_s,
            self.hw_init_s,
            self.hw_decode_s,
            self.cpu_share_s,
            self.gpu_huffman_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DecodeTimings {
        DecodeTimings {
            calls: 2,
            images: 512,
            probe_s: 0.002,
            stream_wait_s: 0.0003,
            staging_wait_s: 0.0005,
            staging_copy_s: 0.001,
            hw_lanes_s: 0.018,
            hw_init_s: 0.0002,
            hw_decode_s: 0.06,
            hw_lane_max_s: 0.017,
            cuda_s: 0.0,
            cpu_s: 0.0,
            cpu_share_s: 0.0,
            gpu_huffman_s: 0.004,
            total_s: 0.0256,
        }
    }

    #[test]
    fn accumulation_adds_every_field() {
        let mut t = DecodeTimings::default();
        t += sample();
        t += sample();
        let s = sample();
        assert_eq!(t.calls, 4);
        assert_eq!(t.images, 1024);
        for (got, one) in [
            (t.probe_s, s.probe_s),
            (t.stream_wait_s, s.stream_wait_s),
            (t.staging_wait_s, s.staging_wait_s),
            (t.staging_copy_s, s.staging_copy_s),
            (t.hw_lanes_s, s.hw_lanes_s),
            (t.hw_init_s, s.hw_init_s),
            (t.hw_decode_s, s.hw_decode_s),
            (t.hw_lane_max_s, s.hw_lane_max_s),
            (t.cuda_s, s.cuda_s),
            (t.cpu_s, s.cpu_s),
            (t.cpu_share_s, s.cpu_share_s),
            (t.gpu_huffman_s, s.gpu_huffman_s),
            (t.total_s, s.total_s),
        ] {
            assert!((got - 2.0 * one).abs() < 1e-12, "{got} vs 2 × {one}");
        }
        // Per-image figures do not change when everything doubles.
        assert!((t.host_us_per_image() - s.host_us_per_image()).abs() < 1e-9);
        assert!((s.host_us_per_image() - 50.0).abs() < 1e-9);
        assert!((s.images_per_second() - 20_000.0).abs() < 1e-6);
    }

    #[test]
    fn display_is_one_line_with_every_phase() {
        let line = sample().to_string();
        assert!(!line.contains('\n'), "{line}");
        for key in [
            "calls 2",
            "images 512",
            "total 0.026s",
            "50.0 us/img",
            "probe 0.002s (8%)",
            "stream_wait 0.000s (1%)",
            "staging_wait",
            "lanes 0.018s (70%)",
            "lane_max",
            "cuda 0.000s (0%)",
            "cpu 0.000s",
            "copy 0.001s",
            "init 0.000s",
            "decode 0.060s",
            "cpu_share 0.000s",
            "gpu_huffman 0.004s",
        ] {
            assert!(line.contains(key), "{key:?} missing from {line:?}");
        }
    }

    #[test]
    fn empty_timings_have_no_nan() {
        let t = DecodeTimings::default();
        assert_eq!(t.host_us_per_image(), 0.0);
        assert_eq!(t.images_per_second(), 0.0);
        let line = t.to_string();
        assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
    }

    #[test]
    fn serializes_with_field_names() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["calls"], 2);
        assert_eq!(v["images"], 512);
        assert!(v["hw_decode_s"].as_f64().unwrap() > 0.05);
        assert_eq!(v.as_object().unwrap().len(), 15);
    }
}
