//! The `Loader` arguments that take more than one check of one value: `shuffle`,
//! `device`, the names of `dtype` and `layout`, the transform's arguments together, and
//! the GPU path's settings.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString, PyType};
use stoker_loader::{Device, LoaderBuilder, Shuffle, Transform};

use crate::args;
use crate::errors::warn;

pub(crate) fn parse_shuffle(
    shuffle: Option<&Bound<'_, PyAny>>,
    seed: u64,
    block: u32,
) -> PyResult<Shuffle> {
    let Some(s) = shuffle else {
        return Ok(Shuffle::Global { seed });
    };
    if let Ok(on) = s.extract::<bool>() {
        return Ok(if on {
            Shuffle::Global { seed }
        } else {
            Shuffle::Sequential
        });
    }
    match s.extract::<String>().as_deref() {
        Ok("global") => Ok(Shuffle::Global { seed }),
        Ok("quasi") => Ok(Shuffle::Quasi { seed, block }),
        Ok("sequential") => Ok(Shuffle::Sequential),
        _ => Err(PyValueError::new_err(format!(
            "shuffle={s}: want True, False, \"global\", \"quasi\" or \"sequential\""
        ))),
    }
}

/// `device=`: a name (`"cuda:1"`, a `torch.device`, see [`spelled`]), or the int `N`,
/// which torch reads as `cuda:N` (`torch.device(0)`; a bool is refused).
pub(crate) fn device(device: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
    match device.filter(|d| d.is_instance_of::<PyInt>()) {
        Some(n) => parse_device(&format!(
            "cuda:{}",
            args::int::<u32>(n, "device", args::Bounds::at_least(0))?
        )),
        None => parse_device(spelled(device, "device")?.as_deref().unwrap_or("auto")),
    }
}

fn parse_device(device: &str) -> PyResult<Device> {
    device.parse().map_err(|_| {
        bad(
            "device",
            device,
            "\"auto\", \"cpu\", \"cuda\" or \"cuda:N\"",
        )
    })
}

/// The GPU path's settings (ignored on the CPU path), as `Loader` takes them.
pub(crate) struct GpuSettings<'a> {
    pub(crate) pinned_memory: Option<u64>,
    pub(crate) page_lock_limit: Option<u64>,
    pub(crate) waits: &'a str,
    pub(crate) cpu_share: Option<f32>,
}

impl GpuSettings<'_> {
    /// `builder` with these settings, or a `ValueError` naming the bad one.
    pub(crate) fn apply(&self, mut builder: LoaderBuilder) -> PyResult<LoaderBuilder> {
        let waits: stoker_decode::WaitMode = self
            .waits
            .parse()
            .map_err(|_| bad("gpu_waits", self.waits, "\"auto\", \"spin\" or \"block\""))?;
        builder = builder.gpu_waits(waits);
        if let Some(bytes) = self.pinned_memory {
            builder = builder.pinned_memory(bytes);
        }
        if let Some(bytes) = self.page_lock_limit {
            builder = builder.page_lock_limit(bytes);
        }
        if let Some(share) = self.cpu_share {
            builder = builder.gpu_cpu_share(share);
        }
        Ok(builder)
    }
}

/// The `Loader` arguments that make its per-image transform.
pub(crate) struct TransformArgs<'a> {
    pub(crate) crop: &'a str,
    pub(crate) size: u32,
    pub(crate) resize: Option<u32>,
    pub(crate) scale: Option<(f64, f64)>,
    pub(crate) ratio: Option<(f64, f64)>,
    pub(crate) hflip: f64,
    pub(crate) mean: Option<[f32; 3]>,
    pub(crate) std: Option<[f32; 3]>,
    /// `dtype="uint8"`: raw pixels, which nothing normalizes.
    pub(crate) uint8: bool,
}

impl TransformArgs<'_> {
    /// The transform, a `ValueError` for arguments that would be ignored, and a
    /// `UserWarning` for a mean/std that looks like 0-255 units.
    pub(crate) fn transform(&self, py: Python<'_>) -> PyResult<Transform> {
        let (mean, std) = (self.mean, self.std);
        let random = self.crop == "random";
        let ignored = |what: &str, why: &str| {
            Err(PyValueError::new_err(format!(
                "{what} would be ignored: {why}"
            )))
        };
        if random && self.resize.is_some() {
            return ignored(
                "resize",
                "it applies to crop=\"center\"; crop=\"random\" picks its own scale",
            );
        }
        if !random && (self.scale.is_some() || self.ratio.is_some()) {
            return ignored(
                "scale/ratio",
                "they apply to crop=\"random\" (RandomResizedCrop)",
            );
        }
        if self.uint8 && (mean.is_some() || std.is_some()) {
            return ignored(
                "mean/std",
                "dtype=\"uint8\" gives raw pixels; normalize them yourself, or ask for float32/float16/bfloat16",
            );
        }
        if mean.is_some() != std.is_some() {
            // Normalizing by one of the two alone is almost always a forgotten argument
            // (torchvision's Normalize takes both), and the outputs would look plausible.
            return Err(PyValueError::new_err(format!(
                "mean={}, std={}: give mean and std together (as torchvision's Normalize); to only center, pass std=(1.0, 1.0, 1.0), to only scale, mean=(0.0, 0.0, 0.0)",
                triple(mean),
                triple(std)
            )));
        }
        let mut transform = match self.crop {
            "random" => Transform::random_resized_crop(self.size),
            "center" => match self.resize {
                Some(resize) => Transform::center_crop(self.size, resize),
                None => Transform::center_crop_default(self.size),
            },
            other => return Err(bad("crop", other, "\"random\" or \"center\"")),
        }
        .hflip(self.hflip);
        if let Some((lo, hi)) = self.scale {
            transform = transform.scale(lo, hi);
        }
        if let Some((lo, hi)) = self.ratio {
            transform = transform.ratio(lo, hi);
        }
        if mean.into_iter().chain(std).flatten().any(|v| v.abs() > 1.0) {
            // Pixels are normalized from [0, 1] (as torchvision's ToTensor gives them):
            // (123.7, 116.3, 103.5) is the usual slip, and every output would be about -2.
            let text = format!(
                "mean={}, std={}: stoker normalizes pixels in [0, 1] (pixel / 255); values over 1 look like 0-255 units (stoker.IMAGENET_MEAN/IMAGENET_STD are in [0, 1])",
                triple(mean),
                triple(std)
            );
            warn(py, text)?;
        }
        if let (Some(mean), Some(std)) = (mean, std) {
            transform = transform.normalize(mean, std);
        }
        Ok(transform)
    }
}

/// A mean or std as Python spells it: `(0.485, 0.456, 0.406)`, or `None`.
fn triple(v: Option<[f32; 3]>) -> String {
    v.map_or_else(|| "None".into(), |[a, b, c]| format!("({a}, {b}, {c})"))
}

/// The name of a `dtype` or `device` argument: a string, a type's `__name__`
/// (`numpy.float16`), or another object's `str()` (`torch.float16`,
/// `torch.device("cuda:1")`, `numpy.dtype("uint8")`), without a `torch.` prefix; it then
/// has to be one of the names.
pub(crate) fn spelled(arg: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<String>> {
    let Some(arg) = arg.filter(|a| !a.is_none()) else {
        return Ok(None);
    };
    // A str that is no UTF-8 (a lone surrogate) is named, not a bare UnicodeEncodeError.
    let text = if arg.is_instance_of::<PyString>() {
        args::text(arg, name)?
    } else if arg.is_instance_of::<PyType>() {
        args::text(&arg.getattr("__name__")?, name)?
    } else {
        let shown = arg.str().map_err(|_| {
            PyTypeError::new_err(format!("{name}: want a string, not {}", arg.get_type()))
        })?;
        args::text(shown.as_any(), name)?
    };
    let text = text.trim();
    Ok(Some(text.strip_prefix("torch.").unwrap_or(text).to_owned()))
}

pub(crate) fn bad(name: &str, got: &str, want: &str) -> PyErr {
    PyValueError::new_err(format!("{name}={got:?}: want {want}"))
}
