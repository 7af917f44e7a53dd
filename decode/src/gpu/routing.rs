//! Step 1 of a batch: probe every image (pixel limit, unsupported features,
//! output size) and route it to the hardware engines, the CUDA decoder or the
//! CPU, in parallel chunks for large batches.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use rayon::prelude::*;

use super::batch::{Decoded, Plan};
use crate::nvjpeg::JpegStream;
use crate::threads::{in_pool, pool_threads};
use crate::{probe, DecodeError, ImageInfo, Limits, Route};

/// Step 1 runs on rayon from this many images up.
const PARALLEL_ROUTE_MIN: usize = 32;
/// Fewest images per parallel step-1 chunk.
const ROUTE_CHUNK_MIN: usize = 16;

/// Step 1 for a batch: [`route_one`] for every input, in order. From
/// [`PARALLEL_ROUTE_MIN`] images up it runs on rayon in chunks, chunk `p`
/// checking with the `p`-th of the hardware handle's check streams (a JPEG
/// stream serves one thread at a time); each image's result is the same
/// either way.
pub(super) fn route_batch(
    check: Option<(&mut [JpegStream], &Arc<CudaContext>)>,
    limits: &Limits,
    inputs: &[&[u8]],
    out_lens: &[usize],
) -> Vec<Decoded> {
    let n = inputs.len();
    let most = match &check {
        Some((streams, _)) => streams.len().max(1),
        None => pool_threads(),
    };
    let parts = if n >= PARALLEL_ROUTE_MIN {
        most.min(n / ROUTE_CHUNK_MIN).max(1)
    } else {
        1
    };
    let chunk = n.div_ceil(parts).max(1);
    let ctx = check.as_ref().map(|(_, ctx)| *ctx);
    let run = |p: usize, stream: Option<&mut JpegStream>| -> Vec<Decoded> {
        let mut stream = stream.and_then(|s| {
            // A rayon thread may not have the decoder's context current, and
            // nvJPEG's checks may call CUDA; without it, route by the header.
            if parts > 1 {
                if let Some(Err(e)) = ctx.map(|c| c.bind_to_thread()) {
                    tracing::debug!("binding the CUDA context for routing failed ({e})");
                    return None;
                }
            }
            Some(s)
        });
        let (lo, hi) = ((p * chunk).min(n), ((p + 1) * chunk).min(n));
        (lo..hi)
            .map(|i| route_one(stream.as_deref_mut(), limits, inputs[i], out_lens[i]))
            .collect()
    };
    let chunks: Vec<Vec<Decoded>> = match check {
        // Without a pool the chunks run one after another, each with its own stream as in
        // parallel; the results are the same.
        Some((streams, _)) if parts > 1 => in_pool(|parallel| {
            let streams = &mut streams[..parts];
            if parallel {
                (streams.par_iter_mut().enumerate())
                    .map(|(p, s)| run(p, Some(s)))
                    .collect()
            } else {
                (streams.iter_mut().enumerate())
                    .map(|(p, s)| run(p, Some(s)))
                    .collect()
            }
        }),
        Some((streams, _)) => vec![run(0, streams.first_mut())],
        None if parts > 1 => in_pool(|parallel| {
            if parallel {
                (0..parts).into_par_iter().map(|p| run(p, None)).collect()
            } else {
                (0..parts).map(|p| run(p, None)).collect()
            }
        }),
        None => vec![run(0, None)],
    };
    chunks.into_iter().flatten().collect()
}

/// Step 1 for one image: probe (pixel limit, unsupported features), check the
/// output size, then route: the hardware engines when the header allows it
/// and `nvjpegDecodeBatchedSupported` agrees, the CUDA decoder for other
/// nvJPEG-decodable files, the CPU for the rest and for headers nvJPEG cannot read.
///
/// With `check`, a JPEG stream made from the hardware handle that this call
/// alone uses.
fn route_one(
    check: Option<&mut JpegStream>,
    limits: &Limits,
    data: &[u8],
    out_len: usize,
) -> Result<(ImageInfo, Route), DecodeError> {
    let info = probe(data, limits)?;
    info.supported()?;
    if out_len < info.rgb_len() {
        return Err(DecodeError::OutputTooSmall {
            need: info.rgb_len(),
            got: out_len,
        });
    }
    let route = match check {
        Some(stream) if info.hardware_decodable() => {
            let ok = stream
                .parse_header(data)
                .and_then(|()| stream.batched_supported());
            match ok {
                Ok(true) => Route::NvjpegHardware,
                Ok(false) => Route::NvjpegCuda,
                // nvJPEG cannot read the header: let the CPU decide.
                Err(_) => Route::CpuZune,
            }
        }
        _ if info.nvjpeg_decodable() => Route::NvjpegCuda,
        _ => Route::CpuZune,
    };
    Ok((info, route))
}

/// Step 1's results as bookkeeping: the header of every accepted image, and
/// the plan with each rejected image's error and every other image in the
/// list of the stage its route names.
pub(super) fn plan(routed: Vec<Decoded>) -> (Vec<Option<ImageInfo>>, Plan) {
    let n = routed.len();
    let mut infos: Vec<Option<ImageInfo>> = (0..n).map(|_| None).collect();
    let mut plan = Plan {
        results: (0..n).map(|_| None).collect(),
        hw: Vec::new(),
        cuda: Vec::new(),
        cpu: Vec::new(),
    };
    for (i, routed) in routed.into_iter().enumerate() {
        match routed {
            Ok((info, route)) => {
                match route {
                    Route::NvjpegHardware => plan.hw.push(i),
                    Route::NvjpegCuda => plan.cuda.push(i),
                    _ => plan.cpu.push(i),
                }
                infos[i] = Some(info);
            }
            Err(e) => plan.results[i] = Some(Err(e)),
        }
    }
    (infos, plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Step 1 in parallel chunks gives the same per-image results, in the
    /// same order, as one image after another (CPU routes: no nvJPEG here).
    #[test]
    fn parallel_routing_matches_serial_routing() {
        let dir = stoker_testdata::dir().join("conformance/core");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut files: Vec<Vec<u8>> = entries
            .flatten()
            .filter_map(|e| std::fs::read(e.path()).ok())
            .collect();
        files.push(b"not a jpeg".to_vec());
        files.push(Vec::new());
        let inputs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
        // Small outputs for some, so OutputTooSmall shows up too.
        let out_lens: Vec<usize> = (0..inputs.len())
            .map(|i| if i % 7 == 3 { 16 } else { usize::MAX })
            .collect();
        let limits = Limits::default();
        let serial: Vec<_> = inputs
            .iter()
            .zip(&out_lens)
            .map(|(d, &l)| route_one(None, &limits, d, l))
            .collect();
        let parallel = route_batch(None, &limits, &inputs, &out_lens);
        assert!(
            inputs.len() >= PARALLEL_ROUTE_MIN,
            "too few files to go parallel"
        );
        assert_eq!(serial.len(), parallel.len());
        for (i, (a, b)) in serial.iter().zip(&parallel).enumerate() {
            match (a, b) {
                (Ok(x), Ok(y)) => assert_eq!(x, y, "image {i}"),
                (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "image {i}"),
                _ => panic!("image {i}: {a:?} vs {b:?}"),
            }
        }
        assert!(serial.iter().any(Result::is_err) && serial.iter().any(Result::is_ok));
    }
}
