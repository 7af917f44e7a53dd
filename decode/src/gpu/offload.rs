//! How many of a batch's CUDA-decoder images (progressive files, and other
//! files the hardware engines refuse) are decoded on the CPU share's threads
//! instead, beside the engines ([`GpuDecoderOptions::cpu_offload`]).
//!
//! Why: the CUDA decoder is several times slower per image than the engines
//! (its Huffman decoding runs on a few host threads), so a quarter of
//! progressive files in a batch can keep it busy long after the engines are
//! done, while the spare cores may be idle. Which side costs less depends on
//! the machine (cores, their speed, what else runs on them) and on the files,
//! so the split is chosen from what each batch measured: the GPU side's time
//! (the engines and, beside them, the CUDA decoder) and the share threads'
//! time are brought together, one batch's gap at a time.
//!
//! [`GpuDecoderOptions::cpu_offload`]: super::options::GpuDecoderOptions::cpu_offload

/// What one batch measured, for [`OffloadControl::update`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Measured {
    /// Images the CUDA decoder took on the calling thread, and its seconds.
    pub(super) n_cuda: usize,
    pub(super) cuda_s: f64,
    /// Seconds of the GPU side: the longer of the engines' part and the CUDA
    /// decoder's, which run side by side (as do the share's threads).
    pub(super) main_s: f64,
    /// Images offloaded to the share's threads, and their share of the
    /// threads' wall time.
    pub(super) n_offloaded: usize,
    pub(super) offloaded_s: f64,
    /// Wall seconds of the share's threads for the whole batch (the offloaded
    /// images and the CPU share's own), 0 without a share job.
    pub(super) share_s: f64,
}

/// The offload in force for the next batch (see the module docs).
///
/// It keeps a fraction `g` of each batch's CUDA-decoder images and, after
/// each batch, moves the count by the gap between the GPU side's time and the
/// share threads' time, divided by what one image moved from one side to the
/// other changes that gap (its CUDA seconds plus its seconds on the share's
/// threads, both running averages). Where the engines' part is the longer
/// side, moving images changes only the share's time: the count then grows
/// until the share takes as long as the engines, which costs the batch
/// nothing. While it offloads nothing, one
/// image every [`OffloadControl::PROBE_EVERY`] batches (doubling up to
/// [`OffloadControl::PROBE_MAX`] while the answer stays no) keeps the CPUs'
/// cost measured.
#[derive(Debug, Clone)]
pub(super) struct OffloadControl {
    enabled: bool,
    /// Fraction of the CUDA-decoder images offloaded, 0..=1.
    fraction: f64,
    /// Seconds per image on the CUDA decoder (calling thread), and on the
    /// share's threads (wall time, as the pool runs them), running averages.
    cuda_per_image: Option<f64>,
    cpu_per_image: Option<f64>,
    /// Batches since the last probe, and the interval.
    since_probe: u32,
    probe_every: u32,
    /// The last batch was a probe (one image offloaded while the fraction is 0).
    probing: bool,
}

impl OffloadControl {
    /// Where the fraction starts: enough images to measure the CPUs' cost on
    /// the first batch without betting the batch on it.
    const START: f64 = 0.25;
    /// How much of one batch's gap the next batch closes: timings are noisy.
    const GAIN: f64 = 0.5;
    /// Weight of a new batch in the per-image running averages.
    const RATE_WEIGHT: f64 = 0.3;
    const PROBE_EVERY: u32 = 16;
    const PROBE_MAX: u32 = 256;

    pub(super) fn new(enabled: bool) -> OffloadControl {
        OffloadControl {
            enabled,
            fraction: if enabled { Self::START } else { 0.0 },
            cuda_per_image: None,
            cpu_per_image: None,
            since_probe: 0,
            probe_every: Self::PROBE_EVERY,
            probing: false,
        }
    }

    /// Whether offloading is on at all (then the share's threads exist).
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The fraction of CUDA-decoder images offloaded now.
    pub(super) fn fraction(&self) -> f64 {
        self.fraction
    }

    /// How many of a batch's `n_cuda` CUDA-decoder images go to the CPUs (at
    /// most `n_cuda`).
    pub(super) fn take(&mut self, n_cuda: usize) -> usize {
        if !self.enabled || n_cuda == 0 {
            return 0;
        }
        let k = ((n_cuda as f64) * self.fraction).round() as usize;
        if k > 0 {
            self.since_probe = 0;
            return k.min(n_cuda);
        }
        self.since_probe += 1;
        if self.since_probe >= self.probe_every {
            self.since_probe = 0;
            self.probing = true;
            return 1;
        }
        0
    }

    /// One batch's measurements (`n_total` CUDA-decoder images, offloaded ones
    /// included): sets the next batch's fraction.
    pub(super) fn update(&mut self, n_total: usize, m: Measured) {
        let probed = std::mem::take(&mut self.probing);
        if !self.enabled || n_total == 0 {
            return;
        }
        let per = |n: usize, s: f64| (n > 0 && s > 0.0 && s.is_finite()).then(|| s / n as f64);
        let mix = |old: Option<f64>, new: Option<f64>| match (old, new) {
            (Some(o), Some(n)) => Some(o + Self::RATE_WEIGHT * (n - o)),
            (o, n) => n.or(o),
        };
        self.cuda_per_image = mix(self.cuda_per_image, per(m.n_cuda, m.cuda_s));
        self.cpu_per_image = mix(self.cpu_per_image, per(m.n_offloaded, m.offloaded_s));
        let (Some(c), Some(q)) = (self.cuda_per_image, self.cpu_per_image) else {
            // Nothing known of one side: offload what the other side leaves.
            if self.cpu_per_image.is_none() {
                self.fraction = self.fraction.max(Self::START);
            }
            return;
        };
        if !(m.main_s.is_finite() && m.share_s.is_finite()) {
            return;
        }
        // The count at which both sides take as long (moving one image
        // changes the gap by its time on both sides), and a step toward it.
        let now = m.n_offloaded as f64;
        let balance = now + (m.main_s - m.share_s) / (c + q);
        let k = now + Self::GAIN * (balance - now);
        // Not even one image pays: off (probes keep the CPUs' cost measured),
        // and a probe that says so again makes the next one wait longer.
        if balance < 0.5 {
            if probed {
                self.probe_every = (self.probe_every * 2).min(Self::PROBE_MAX);
            }
            self.fraction = 0.0;
        } else {
            self.probe_every = Self::PROBE_EVERY;
            self.fraction = (k / n_total as f64).clamp(0.0, 1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated machine: each batch of 256 has `n_cuda` CUDA-decoder
    /// images; the engines take `hw_s` for the rest; the CUDA decoder, beside
    /// them, `c` s per image; the share's threads `q` s per image (wall, as
    /// the pool runs them), plus `share_own_s` of other share work.
    struct Machine {
        n_cuda: usize,
        hw_s: f64,
        c: f64,
        q: f64,
        share_own_s: f64,
    }

    impl Machine {
        /// The batch with `k` images offloaded: what it measures, and its time.
        fn batch(&self, k: usize) -> (Measured, f64) {
            let main_s = self.hw_s.max(self.c * (self.n_cuda - k) as f64);
            let offloaded_s = self.q * k as f64;
            let share_s = self.share_own_s + offloaded_s;
            let m = Measured {
                n_cuda: self.n_cuda - k,
                cuda_s: self.c * (self.n_cuda - k) as f64,
                main_s,
                n_offloaded: k,
                offloaded_s,
                share_s,
            };
            (m, main_s.max(share_s))
        }

        /// Runs `batches` batches; returns the controller and the mean batch
        /// time over the last `tail`.
        fn run(&self, batches: usize, tail: usize) -> (OffloadControl, f64) {
            let mut c = OffloadControl::new(true);
            let mut total = 0.0;
            for b in 0..batches {
                let k = c.take(self.n_cuda);
                let (m, t) = self.batch(k);
                if b >= batches - tail {
                    total += t;
                }
                c.update(self.n_cuda, m);
            }
            (c, total / tail as f64)
        }

        /// The best batch time over every possible split.
        fn best(&self) -> f64 {
            (0..=self.n_cuda)
                .map(|k| self.batch(k).1)
                .fold(f64::INFINITY, f64::min)
        }

        /// The batch time with nothing offloaded.
        fn none(&self) -> f64 {
            self.batch(0).1
        }
    }

    #[test]
    fn spare_cores_take_the_progressive_files_until_both_sides_balance() {
        // A quarter progressive: the CUDA decoder at 4.6k img/s after the
        // engines' 192 images at 30k img/s; ten cores at 1.5 k img/s together.
        let m = Machine {
            n_cuda: 64,
            hw_s: 192.0 / 30_000.0,
            c: 1.0 / 4_600.0,
            q: 1.0 / 1_500.0,
            share_own_s: 0.0,
        };
        let (c, tail) = m.run(40, 20);
        assert!(c.fraction() > 0.0 && c.fraction() < 1.0, "{}", c.fraction());
        assert!(tail <= 1.03 * m.best(), "{tail} vs best {}", m.best());
        assert!(tail < 0.8 * m.none(), "{tail} vs none {}", m.none());
    }

    #[test]
    fn slow_cores_get_nothing_after_the_first_batches_but_probes() {
        // One slow core: one offloaded image takes longer than the whole GPU
        // side (14 ms).
        let m = Machine {
            n_cuda: 64,
            hw_s: 192.0 / 30_000.0,
            c: 1.0 / 4_600.0,
            q: 0.05,
            share_own_s: 0.0,
        };
        let (c, tail) = m.run(1100, 1024);
        assert_eq!(c.fraction(), 0.0);
        // Probes of one image, every 256 batches in the steady state, cost at
        // most 2 % (each one lengthens its batch 3.6 times here).
        assert!(tail <= 1.02 * m.none(), "{tail} vs none {}", m.none());
    }

    #[test]
    fn a_busy_cpu_share_leaves_the_cuda_decoder_its_images() {
        // The share's threads already take longer than the calling thread
        // with the CPU share's own images: offloading only adds to them.
        let m = Machine {
            n_cuda: 32,
            hw_s: 0.004,
            c: 1.0 / 4_600.0,
            q: 1.0 / 2_000.0,
            share_own_s: 0.02,
        };
        let (c, tail) = m.run(100, 50);
        assert_eq!(c.fraction(), 0.0);
        assert!(tail <= 1.02 * m.none());
    }

    #[test]
    fn without_engines_the_split_still_balances() {
        // Every image on the CUDA decoder (no hardware engines).
        let m = Machine {
            n_cuda: 256,
            hw_s: 0.0,
            c: 1.0 / 4_600.0,
            q: 1.0 / 3_000.0,
            share_own_s: 0.0,
        };
        let (_, tail) = m.run(40, 20);
        assert!(tail <= 1.03 * m.best(), "{tail} vs best {}", m.best());
    }

    #[test]
    fn off_or_without_cuda_images_nothing_moves() {
        let mut off = OffloadControl::new(false);
        assert_eq!(off.take(64), 0);
        off.update(64, Measured::default());
        assert_eq!(off.fraction(), 0.0);
        let mut on = OffloadControl::new(true);
        assert_eq!(on.take(0), 0);
        on.update(0, Measured::default());
        assert_eq!(on.fraction(), OffloadControl::START);
        // Degenerate timings change nothing.
        let nan = Measured {
            n_cuda: 10,
            cuda_s: f64::NAN,
            main_s: f64::NAN,
            n_offloaded: 5,
            offloaded_s: 0.0,
            share_s: 0.0,
        };
        on.update(15, nan);
        assert_eq!(on.fraction(), OffloadControl::START);
    }
}
