//! What happens to each image between decode and the batch: crop, resize, flip, normalize,
//! layout and dtype.
//!
//! [`Transform`] is the description; [`Transform::params`] draws the per-sample random
//! parameters from `(seed, epoch, draw key)` and the source size alone, so the CPU path
//! (`resize.rs`, `layout.rs`) and the GPU path (`loader/src/gpu/`) crop and flip identically.
//! The [`DrawKey`] is the sample's place in the epoch (its position in the epoch's global
//! order, and which replacement of a bad record it is), not the record: a record that
//! appears twice in an epoch (a bad record's replacement, a distributed padding copy) gets
//! two independent crops.

pub(crate) mod layout;
pub(crate) mod resize;

use crate::error::LoaderError;
use crate::sampler::{Rng, STREAM_TRANSFORM};

/// The largest output side a transform takes: a 16384² f32 batch of one image is 3 GiB.
pub const MAX_OUTPUT_SIZE: u32 = 16384;

/// ImageNet channel means (RGB, in `[0, 1]` units), the usual argument to
/// [`Transform::normalize`].
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations (RGB, in `[0, 1]` units).
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// How the crop is chosen.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum CropMode {
    /// torchvision `RandomResizedCrop(size, scale, ratio)`: a random area fraction in `scale`
    /// and a log-uniform aspect ratio in `ratio`, 10 attempts, then a center crop fallback.
    RandomResized {
        /// Area fraction range of the source (torchvision default `(0.08, 1.0)`).
        scale: (f64, f64),
        /// Aspect ratio range w/h (torchvision default `(3/4, 4/3)`).
        ratio: (f64, f64),
    },
    /// Evaluation: torchvision `Resize(resize)` (shorter side to `resize`) then
    /// `CenterCrop(size)`, expressed as one crop of the source.
    Center {
        /// Shorter side after the resize (e.g. 256 for a 224 crop).
        resize: u32,
    },
}

/// The per-image transform: crop → resize to `size × size` → optional horizontal flip →
/// normalize (float outputs) → layout/dtype of the chosen [`crate::Output`].
///
/// # Examples
///
/// ```
/// use stoker_loader::Transform;
/// use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
/// let train = Transform::random_resized_crop(224).hflip(0.5).normalize(IMAGENET_MEAN, IMAGENET_STD);
/// use stoker_loader::transform::DrawKey;
/// let p = train.params(0, 0, DrawKey::at(42), 500, 375);
/// let (x, y, w, h) = p.crop;
/// assert!(x + w <= 500 && y + h <= 375 && w > 0 && h > 0);
/// assert_eq!(p, train.params(0, 0, DrawKey::at(42), 500, 375)); // a pure function of its inputs
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Transform {
    /// Output side in pixels (square output).
    size: u32,
    crop: CropMode,
    /// Probability of a horizontal flip, in `[0, 1]`.
    hflip: f64,
    /// Channel means and standard deviations in `[0, 1]` pixel units; identity = `(0, 1)`.
    mean: [f32; 3],
    std: [f32; 3],
}

/// The random choices for one sample, in source pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SampleParams {
    /// `(x, y, w, h)`: the source rectangle that is resized to the output size
    /// (`x + w ≤ src_w`, `y + h ≤ src_h`, `w, h ≥ 1`).
    pub crop: (u32, u32, u32, u32),
    /// Mirror the output horizontally.
    pub flip: bool,
}

/// Which draw of an epoch a sample gets: its place in the epoch, not the record it holds.
///
/// `position` is the sample's position in the epoch's global order (rank `r`'s position
/// `p` is [`crate::Sampler::global_position`]`(p)`; a distributed padding copy has a
/// position past the dataset's length), and `attempt` is 0 for the record the order puts
/// there, `a` for the `a`-th replacement of a bad one. So a record used twice in an epoch
/// never gets the same crop and flip twice by construction, and the draw depends on
/// nothing a worker count or a resume could change.
///
/// # Examples
///
/// ```
/// use stoker_loader::transform::DrawKey;
/// use stoker_loader::Transform;
/// let t = Transform::random_resized_crop(224).hflip(0.5);
/// let first = t.params(7, 0, DrawKey::at(3), 500, 375);
/// let replaced = t.params(7, 0, DrawKey { position: 3, attempt: 1 }, 500, 375);
/// assert_ne!(first, replaced);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DrawKey {
    /// Position in the epoch's global order.
    pub position: u64,
    /// 0 for the order's own record, `a ≥ 1` for the `a`-th replacement of a bad one.
    pub attempt: u32,
}

impl DrawKey {
    /// The key of the order's own record at global position `position`.
    pub fn at(position: u64) -> DrawKey {
        DrawKey {
            position,
            attempt: 0,
        }
    }
}

impl SampleParams {
    /// The crop as a decoder region: the only source pixels the resize reads (the CPU
    /// path copies the crop out first; the GPU kernel's taps stay inside the crop box), so
    /// a decode may skip the rest.
    pub(crate) fn region(&self) -> stoker_decode::Region {
        let (x, y, width, height) = self.crop;
        stoker_decode::Region {
            x,
            y,
            width,
            height,
        }
    }
}

impl Transform {
    /// Training crop: torchvision `RandomResizedCrop(size)` with `scale = (0.08, 1)` and
    /// `ratio = (3/4, 4/3)`; no flip and no normalization until asked.
    pub fn random_resized_crop(size: u32) -> Self {
        Transform {
            size,
            crop: CropMode::RandomResized {
                scale: (0.08, 1.0),
                ratio: (3.0 / 4.0, 4.0 / 3.0),
            },
            hflip: 0.0,
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    }

    /// Evaluation crop: shorter side resized to `resize`, then the central `size × size`.
    pub fn center_crop(size: u32, resize: u32) -> Self {
        Transform {
            size,
            crop: CropMode::Center { resize },
            hflip: 0.0,
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    }

    /// The usual evaluation crop: shorter side resized to `size * 8 / 7` (256 for 224,
    /// torchvision's ImageNet recipe: `Resize(256)`, `CenterCrop(224)`), then the central
    /// `size × size`. Computed in u64 and saturated, so a size the transform refuses later
    /// is not first an overflow here.
    pub fn center_crop_default(size: u32) -> Self {
        let resize = u32::try_from(u64::from(size) * 8 / 7).unwrap_or(u32::MAX);
        Self::center_crop(size, resize)
    }

    /// Flip horizontally with probability `p`.
    pub fn hflip(mut self, p: f64) -> Self {
        self.hflip = p;
        self
    }

    /// Normalize float outputs: `(pixel / 255 − mean) / std` per RGB channel. Ignored by
    /// [`crate::Output::U8Nhwc`], which hands raw pixels over (normalize on the device).
    pub fn normalize(mut self, mean: [f32; 3], std: [f32; 3]) -> Self {
        self.mean = mean;
        self.std = std;
        self
    }

    /// Replace the area-fraction range of a random resized crop.
    pub fn scale(mut self, lo: f64, hi: f64) -> Self {
        if let CropMode::RandomResized { scale, .. } = &mut self.crop {
            *scale = (lo, hi);
        }
        self
    }

    /// Replace the aspect-ratio range of a random resized crop.
    pub fn ratio(mut self, lo: f64, hi: f64) -> Self {
        if let CropMode::RandomResized { ratio, .. } = &mut self.crop {
            *ratio = (lo, hi);
        }
        self
    }

    /// The output side in pixels.
    pub fn out_size(&self) -> u32 {
        self.size
    }

    /// The crop mode.
    pub fn crop_mode(&self) -> CropMode {
        self.crop
    }

    /// The flip probability.
    pub fn flip_probability(&self) -> f64 {
        self.hflip
    }

    /// `(mean, std)` in `[0, 1]` pixel units.
    pub fn mean_std(&self) -> ([f32; 3], [f32; 3]) {
        (self.mean, self.std)
    }

    /// The largest `|(v − mean) / std|` over pixel values `v` in `[0, 1]` and the three
    /// channels, computed in f32 as the batch values are: the normalization is linear in
    /// `v`, so the ends 0 and 1 bound it.
    pub(crate) fn largest_normalized(&self) -> f32 {
        let mut largest = 0.0f32;
        for (m, s) in self.mean.iter().zip(&self.std) {
            for v in [0.0f32, 1.0] {
                // Finite mean and nonzero finite std (checked first): no NaN, at worst inf.
                largest = largest.max(((v - m) / s).abs());
            }
        }
        largest
    }

    /// Checks the settings once, at build time.
    pub(crate) fn validate(&self) -> Result<(), LoaderError> {
        let bad = |reason: String| {
            Err(LoaderError::InvalidConfig {
                field: "transform",
                reason,
            })
        };
        if self.size == 0 || self.size > MAX_OUTPUT_SIZE {
            return bad(format!(
                "output size {} is not in 1..={MAX_OUTPUT_SIZE}",
                self.size
            ));
        }
        if !(0.0..=1.0).contains(&self.hflip) {
            return bad(format!("flip probability {} is not in [0, 1]", self.hflip));
        }
        if self.std.iter().any(|s| !s.is_finite() || *s == 0.0)
            || self.mean.iter().any(|m| !m.is_finite())
        {
            return bad(format!(
                "normalize mean {:?} / std {:?} must be finite with std ≠ 0",
                self.mean, self.std
            ));
        }
        let largest = self.largest_normalized();
        if !largest.is_finite() {
            // A std of 1e-45 passes the check above, yet every pixel but the mean would be
            // ±inf in the batch: a loss of NaN many steps later instead of an error here.
            return bad(format!(
                "normalize mean {:?} / std {:?} maps pixels past the f32 range ({largest})",
                self.mean, self.std
            ));
        }
        match self.crop {
            CropMode::RandomResized { scale, ratio } => {
                if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                    return bad(format!("scale {scale:?} must satisfy 0 < lo ≤ hi ≤ 1"));
                }
                if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                    return bad(format!("ratio {ratio:?} must satisfy 0 < lo ≤ hi"));
                }
            }
            CropMode::Center { resize } => {
                if resize < self.size {
                    return bad(format!(
                        "center crop {} is larger than the resize {resize}",
                        self.size
                    ));
                }
            }
        }
        Ok(())
    }

    /// The crop and flip for one sample: a pure function of `(seed, epoch, key)` (see
    /// [`DrawKey`]), the source size and this transform, shared by the CPU and GPU paths.
    ///
    /// Random resized crop follows torchvision's `RandomResizedCrop.get_params`: up to 10
    /// attempts at `area · U(scale)` with aspect `exp(U(ln ratio))`, `w = round(√(area·aspect))`,
    /// `h = round(√(area/aspect))`, accepted when it fits, at a uniform position; otherwise the
    /// largest center crop whose aspect is clamped into `ratio`. The flip is drawn after the
    /// crop from the same per-sample stream. `src_w`/`src_h` of 0 are treated as 1.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::Transform;
    /// let eval = Transform::center_crop(224, 256);
    /// // 500×375 → shorter side 375 scaled to 256; the 224 window is 224·375/256 = 328 source px.
    /// let key = stoker_loader::transform::DrawKey::at(0);
    /// assert_eq!(eval.params(0, 0, key, 500, 375).crop, (86, 23, 328, 328));
    /// ```
    pub fn params(
        &self,
        seed: u64,
        epoch: u64,
        key: DrawKey,
        src_w: u32,
        src_h: u32,
    ) -> SampleParams {
        let (width, height) = (src_w.max(1), src_h.max(1));
        let mut rng = Rng::new(&[
            seed,
            epoch,
            key.position,
            u64::from(key.attempt),
            STREAM_TRANSFORM,
        ]);
        let crop = match self.crop {
            CropMode::RandomResized { scale, ratio } => {
                random_resized(&mut rng, width, height, scale, ratio)
            }
            CropMode::Center { resize } => center(width, height, self.size, resize),
        };
        let flip = self.hflip > 0.0 && rng.next_f64() < self.hflip;
        SampleParams { crop, flip }
    }
}

fn random_resized(
    rng: &mut Rng,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> (u32, u32, u32, u32) {
    let area = f64::from(width) * f64::from(height);
    let log_ratio = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target_area = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_ratio.0, log_ratio.1).exp();
        let w = (target_area * aspect).sqrt().round();
        let h = (target_area / aspect).sqrt().round();
        if w > 0.0 && w <= f64::from(width) && h > 0.0 && h <= f64::from(height) {
            let (w, h) = (w as u32, h as u32);
            let y = rng.below(u64::from(height - h) + 1) as u32;
            let x = rng.below(u64::from(width - w) + 1) as u32;
            return (x, y, w, h);
        }
    }
    // Fallback: the whole image, or the largest central crop inside the ratio range.
    let in_ratio = f64::from(width) / f64::from(height);
    let (w, h) = if in_ratio < ratio.0 {
        (
            width,
            ((f64::from(width) / ratio.0).round() as u32).clamp(1, height),
        )
    } else if in_ratio > ratio.1 {
        (
            ((f64::from(height) * ratio.1).round() as u32).clamp(1, width),
            height,
        )
    } else {
        (width, height)
    };
    ((width - w) / 2, (height - h) / 2, w, h)
}

fn center(width: u32, height: u32, size: u32, resize: u32) -> (u32, u32, u32, u32) {
    // Resize(resize) scales the shorter side to `resize`; CenterCrop(size) then keeps `size`
    // pixels of it, i.e. `size · short / resize` source pixels (capped at the image).
    let short = f64::from(width.min(height));
    let side = (f64::from(size) * short / f64::from(resize.max(1)))
        .round()
        .max(1.0);
    let w = (side as u32).min(width);
    let h = (side as u32).min(height);
    ((width - w) / 2, (height - h) / 2, w, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_crops_fit_for_any_source_shape() {
        let t = Transform::random_resized_crop(224).hflip(0.5);
        let mut flips = 0;
        for i in 0..4000u64 {
            let (sw, sh) = (1 + (i % 7) as u32 * 150, 1 + (i % 5) as u32 * 130);
            let p = t.params(9, 1, DrawKey::at(i), sw, sh);
            let (x, y, w, h) = p.crop;
            assert!(
                w >= 1 && h >= 1 && x + w <= sw && y + h <= sh,
                "{p:?} in {sw}×{sh}"
            );
            flips += usize::from(p.flip);
        }
        // Probability 0.5 over 4000 draws: well inside 1700..2300.
        assert!((1700..2300).contains(&flips), "{flips} flips");
    }

    #[test]
    fn random_crop_areas_and_ratios_follow_torchvision() {
        // On a 500×375 source (bench/), nearly every attempt fits, so the area fraction is
        // close to U(0.08, 1) and the aspect within [3/4, 4/3] up to rounding.
        let t = Transform::random_resized_crop(224);
        let (mut small, mut large, n) = (0u32, 0u32, 4000u64);
        for i in 0..n {
            let (_, _, w, h) = t.params(3, 0, DrawKey::at(i), 500, 375).crop;
            let frac = f64::from(w * h) / (500.0 * 375.0);
            let aspect = f64::from(w) / f64::from(h);
            assert!((0.07..=1.0).contains(&frac), "{w}×{h}");
            assert!(aspect > 0.74 && aspect < 1.35, "{w}×{h}");
            small += u32::from(frac < 0.3);
            large += u32::from(frac > 0.7);
        }
        // U(0.08, 1): P(< 0.3) = 0.24, P(> 0.7) = 0.33 before the fit test, which rejects
        // part of the large ones (a 4/3 crop of > 75% of a 4/3 source's area can't be taller)
        // and redraws them: among accepted crops P(< 0.3) ≈ 0.32 and P(> 0.7) ≈ 0.13 (10⁶
        // draws), bounds here ±6σ for 4000.
        let (small, large) = (f64::from(small) / n as f64, f64::from(large) / n as f64);
        assert!((0.28..0.37).contains(&small), "P(frac < 0.3) = {small}");
        assert!((0.10..0.33).contains(&large), "P(frac > 0.7) = {large}");
    }

    #[test]
    fn params_depend_on_seed_epoch_position_and_attempt() {
        let t = Transform::random_resized_crop(224).hflip(0.5);
        let a = t.params(1, 2, DrawKey::at(3), 640, 480);
        assert_eq!(a, t.params(1, 2, DrawKey::at(3), 640, 480));
        let others = [
            t.params(2, 2, DrawKey::at(3), 640, 480),
            t.params(1, 3, DrawKey::at(3), 640, 480),
            t.params(1, 2, DrawKey::at(4), 640, 480),
            t.params(
                1,
                2,
                DrawKey {
                    position: 3,
                    attempt: 1,
                },
                640,
                480,
            ),
        ];
        assert!(others.iter().all(|o| o.crop != a.crop));
    }

    #[test]
    fn fallback_is_the_central_crop_in_ratio() {
        // A scale range that can never fit forces the fallback: a 1000×10 strip is wider
        // than 4/3, so the crop is 13×10 centered.
        let t = Transform::random_resized_crop(32)
            .scale(1.0, 1.0)
            .ratio(0.75, 4.0 / 3.0);
        let p = t.params(0, 0, DrawKey::at(0), 1000, 10);
        assert_eq!(p.crop, (493, 0, 13, 10));
        // Square inside the range: whole image.
        let p = t.params(0, 0, DrawKey::at(0), 50, 50);
        assert_eq!(p.crop, (0, 0, 50, 50));
    }

    #[test]
    fn center_crop_matches_resize_then_center_crop() {
        let t = Transform::center_crop(224, 256);
        assert_eq!(
            t.params(0, 0, DrawKey::at(0), 256, 256).crop,
            (16, 16, 224, 224)
        );
        assert_eq!(
            t.params(0, 0, DrawKey::at(0), 375, 500).crop,
            (23, 86, 328, 328)
        );
        // Tiny image: never larger than the source.
        let (x, y, w, h) = t.params(0, 0, DrawKey::at(0), 1, 1).crop;
        assert_eq!((x, y, w, h), (0, 0, 1, 1));
        assert!(!t.params(0, 0, DrawKey::at(0), 256, 256).flip);
    }

    #[test]
    fn validate_rejects_bad_settings() {
        assert!(Transform::random_resized_crop(0).validate().is_err());
        assert!(Transform::random_resized_crop(8)
            .hflip(1.5)
            .validate()
            .is_err());
        assert!(Transform::random_resized_crop(8)
            .normalize([0.0; 3], [0.0, 1.0, 1.0])
            .validate()
            .is_err());
        assert!(Transform::random_resized_crop(8)
            .scale(0.5, 0.1)
            .validate()
            .is_err());
        assert!(Transform::center_crop(224, 200).validate().is_err());
        assert!(Transform::center_crop(224, 256).validate().is_ok());
    }

    #[test]
    fn default_center_crop_is_torchvisions_recipe() {
        assert_eq!(
            Transform::center_crop_default(224).crop_mode(),
            CropMode::Center { resize: 256 }
        );
        // Saturates instead of overflowing; validation then refuses the size.
        let huge = Transform::center_crop_default(u32::MAX);
        assert_eq!(huge.crop_mode(), CropMode::Center { resize: u32::MAX });
        assert!(huge.validate().is_err());
    }
}
