//! JPEG compatibility audit: what each source JPEG is, and which ones nvJPEG's hardware
//! engines (or nvJPEG as a whole) cannot take, so the loader would fall back to slower paths.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stoker_decode::{ColorSpace, ImageInfo, Subsampling};

/// Counts over the JPEG inputs whose headers could be read (whether written or skipped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Audit {
    /// JPEG inputs whose headers were read.
    pub jpeg_files: u64,
    /// Non-JPEG image inputs (PNG, BMP, GIF, WebP, TIFF), always stored re-encoded or raw.
    pub other_images: u64,
    /// By frame type: `"SOF0"` baseline, `"SOF1"` extended, `"SOF2"` progressive,
    /// `"SOF3"` lossless, `"SOF9"`/`"SOF10"`/`"SOF11"` arithmetic variants, ...
    #[serde(deserialize_with = "crate::bounded::map")]
    pub by_sof: BTreeMap<String, u64>,
    /// By sample precision in bits (`"8"`, `"12"`, `"16"`).
    #[serde(deserialize_with = "crate::bounded::map")]
    pub by_precision: BTreeMap<String, u64>,
    /// By number of components (`"1"`, `"3"`, `"4"`).
    #[serde(deserialize_with = "crate::bounded::map")]
    pub by_components: BTreeMap<String, u64>,
    /// By chroma subsampling (`"4:2:0"`, `"4:4:4"`, `"gray"`, `"nonstandard"`, ...).
    #[serde(deserialize_with = "crate::bounded::map")]
    pub by_subsampling: BTreeMap<String, u64>,
    /// By color space (`"ycbcr"`, `"gray"`, `"rgb"`, `"cmyk"`, `"ycck"`, `"other"`).
    #[serde(deserialize_with = "crate::bounded::map")]
    pub by_color_space: BTreeMap<String, u64>,
    /// Progressive files.
    pub progressive: u64,
    /// Arithmetic-coded files.
    pub arithmetic: u64,
    /// Lossless files.
    pub lossless: u64,
    /// Files the nvJPEG hardware engines take.
    pub gpu_hardware_ok: u64,
    /// Files the hardware engines cannot take (each counted once).
    pub gpu_hardware_rejected: u64,
    /// Files nvJPEG cannot decode at all (CPU fallback at training time).
    pub nvjpeg_rejected: u64,
    /// Why the hardware engines reject files; a file may have several reasons.
    #[serde(deserialize_with = "crate::bounded::map")]
    pub hardware_reject_reasons: BTreeMap<String, u64>,
    /// Files that `--gpu-friendly` re-encoded as baseline 4:2:0.
    pub reencoded_for_gpu: u64,
}

/// What the audit records about one JPEG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JpegClass {
    sof: u8,
    precision: u8,
    components: u8,
    subsampling: String,
    color_space: &'static str,
    progressive: bool,
    arithmetic: bool,
    lossless: bool,
    hardware_ok: bool,
    nvjpeg_ok: bool,
    reasons: Vec<&'static str>,
}

impl JpegClass {
    pub(crate) fn of(info: &ImageInfo) -> JpegClass {
        let color_space = match info.color_space {
            ColorSpace::Gray => "gray",
            ColorSpace::YCbCr => "ycbcr",
            ColorSpace::Rgb => "rgb",
            ColorSpace::Cmyk => "cmyk",
            ColorSpace::Ycck => "ycck",
            _ => "other",
        };
        let hardware_ok = info.hardware_decodable();
        let mut reasons = Vec::new();
        if !hardware_ok {
            if info.progressive {
                reasons.push("progressive");
            }
            if info.arithmetic {
                reasons.push("arithmetic coding");
            }
            if info.lossless {
                reasons.push("lossless");
            }
            if info.hierarchical {
                reasons.push("hierarchical");
            }
            if info.bit_depth != 8 {
                reasons.push("precision other than 8 bits");
            }
            match info.subsampling {
                Subsampling::S411 | Subsampling::S410 => reasons.push("4:1:1/4:1:0 subsampling"),
                Subsampling::Other => reasons.push("nonstandard subsampling"),
                _ => {}
            }
            match info.color_space {
                ColorSpace::Cmyk | ColorSpace::Ycck => reasons.push("CMYK/YCCK"),
                ColorSpace::Rgb => reasons.push("RGB without color transform"),
                ColorSpace::Other => reasons.push("unusual component count"),
                _ => {}
            }
            if info.multi_scan_sequential {
                reasons.push("non-interleaved scans");
            }
            if info.adobe_malformed {
                reasons.push("malformed Adobe segment");
            }
            if reasons.is_empty() {
                reasons.push("other");
            }
        }
        JpegClass {
            sof: info.sof,
            precision: info.bit_depth,
            components: info.components,
            subsampling: info.subsampling.to_string(),
            color_space,
            progressive: info.progressive,
            arithmetic: info.arithmetic,
            lossless: info.lossless,
            hardware_ok,
            nvjpeg_ok: info.nvjpeg_decodable(),
            reasons,
        }
    }

    pub(crate) fn hardware_ok(&self) -> bool {
        self.hardware_ok
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: impl Into<String>) {
    *map.entry(key.into()).or_insert(0) += 1;
}

impl Audit {
    /// Checks that counts read back from a conversion journal could have come from
    /// [`Audit::add_jpeg`] over at most `inputs` inputs: the manifest records them, and
    /// nothing else would catch an edited one.
    pub(crate) fn adds_up(&self, inputs: u64) -> Result<(), String> {
        let files = self.jpeg_files;
        if files
            .checked_add(self.other_images)
            .is_none_or(|n| n > inputs)
        {
            return Err(format!(
                "its audit counts {files} JPEG and {} other images in {inputs} inputs",
                self.other_images
            ));
        }
        let sum = |m: &BTreeMap<String, u64>| m.values().try_fold(0u64, |a, &v| a.checked_add(v));
        let by = [
            ("frame type", &self.by_sof),
            ("precision", &self.by_precision),
            ("components", &self.by_components),
            ("subsampling", &self.by_subsampling),
            ("color space", &self.by_color_space),
        ];
        for (what, m) in by {
            if sum(m) != Some(files) {
                return Err(format!(
                    "its audit by {what} does not add up to {files} JPEGs"
                ));
            }
        }
        let hardware = self.gpu_hardware_ok.checked_add(self.gpu_hardware_rejected);
        let each = [
            self.progressive,
            self.arithmetic,
            self.lossless,
            self.nvjpeg_rejected,
            self.reencoded_for_gpu,
        ];
        if hardware != Some(files) || each.iter().any(|&n| n > files) {
            return Err(format!("its audit counts do not fit {files} JPEGs"));
        }
        Ok(())
    }

    /// Adds one JPEG to the counts.
    pub(crate) fn add_jpeg(&mut self, c: &JpegClass) {
        self.jpeg_files += 1;
        bump(&mut self.by_sof, format!("SOF{}", c.sof));
        bump(&mut self.by_precision, c.precision.to_string());
        bump(&mut self.by_components, c.components.to_string());
        bump(&mut self.by_subsampling, c.subsampling.clone());
        bump(&mut self.by_color_space, c.color_space);
        self.progressive += u64::from(c.progressive);
        self.arithmetic += u64::from(c.arithmetic);
        self.lossless += u64::from(c.lossless);
        if c.hardware_ok {
            self.gpu_hardware_ok += 1;
        } else {
            self.gpu_hardware_rejected += 1;
            for r in &c.reasons {
                bump(&mut self.hardware_reject_reasons, *r);
            }
        }
        self.nvjpeg_rejected += u64::from(!c.nvjpeg_ok);
    }

    /// A short human-readable summary, one fact per line.
    pub fn summary_lines(&self) -> Vec<String> {
        let fmt = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = vec![format!(
            "JPEG inputs: {} (other images: {})",
            self.jpeg_files, self.other_images
        )];
        if self.jpeg_files > 0 {
            out.push(format!("  frame types: {}", fmt(&self.by_sof)));
            out.push(format!("  subsampling: {}", fmt(&self.by_subsampling)));
            out.push(format!("  color spaces: {}", fmt(&self.by_color_space)));
            out.push(format!("  precision: {}", fmt(&self.by_precision)));
            out.push(format!(
                "  GPU hardware decoder: {} take, {} cannot ({} not decodable by nvJPEG at all)",
                self.gpu_hardware_ok, self.gpu_hardware_rejected, self.nvjpeg_rejected
            ));
            if !self.hardware_reject_reasons.is_empty() {
                out.push(format!(
                    "  hardware rejects because: {}",
                    fmt(&self.hardware_reject_reasons)
                ));
            }
            if self.reencoded_for_gpu > 0 {
                out.push(format!(
                    "  re-encoded as baseline 4:2:0 (--gpu-friendly): {}",
                    self.reencoded_for_gpu
                ));
            }
        }
        out
    }
}
