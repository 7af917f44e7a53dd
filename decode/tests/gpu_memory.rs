//! nvJPEG's memory from stoker's caches (`NvjpegMemory::Cached`) on the GPU: the same
//! pixels as with nvJPEG's own allocators, nothing freed once the buffers have their
//! working size, and every block given back when the decoder goes. Run by
//! `scripts/device-check.d/10-decode.sh`; without a GPU each test prints why it skips.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{data_dir, jpegs_under};
use stoker_decode::cudarc::driver::{result, CudaContext, CudaStream};
use stoker_decode::{
    cuda_context, DecodeError, GpuDecoder, GpuDecoderOptions, NvjpegMemory, Route,
};

/// The corpus photographs: sizes from 65 px to 1.3 kpx, a quarter progressive, so that
/// both the engines and the CUDA decoder grow their buffers from batch to batch.
fn photos() -> Vec<Vec<u8>> {
    let files: Vec<PathBuf> = jpegs_under(&data_dir().join("imagefolder"));
    assert!(files.len() >= 100, "{} photographs", files.len());
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The GPU's context, or `None` (the reason printed) without one.
fn context() -> Option<Arc<CudaContext>> {
    cuda_context(0).map_err(stoker_testdata::gpu_skip).ok()
}

fn decoder(ctx: &Arc<CudaContext>, memory: NvjpegMemory) -> Option<GpuDecoder> {
    let options = GpuDecoderOptions {
        nvjpeg_memory: memory,
        // Progressive files on the CUDA decoder, not on the CPUs: its buffers are the
        // ones that grow most with mixed sizes.
        cpu_offload: false,
        ..GpuDecoderOptions::default()
    };
    match GpuDecoder::new(ctx, options) {
        Ok(d) => Some(d),
        Err(DecodeError::Load(e)) => {
            stoker_testdata::gpu_skip(format!("GPU present but nvJPEG not loadable: {e}"));
            None
        }
        Err(e) => panic!("GPU present and nvJPEG loaded, but the decoder failed: {e}"),
    }
}

/// Decodes every file in batches of `batch` (ascending sizes first, then descending, so
/// buffers grow and shrink) and returns each image's route and pixels, in file order.
fn decode_all(
    dec: &mut GpuDecoder,
    stream: &Arc<CudaStream>,
    data: &[Vec<u8>],
    batch: usize,
) -> Vec<(Route, Vec<u8>)> {
    let lens: Vec<usize> = (data.iter())
        .map(|d| {
            stoker_decode::probe(d, &Default::default())
                .unwrap()
                .rgb_len()
        })
        .collect();
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.sort_by_key(|&i| lens[i]);
    let half = order.len() / 2;
    order[half..].reverse();
    let mut out: Vec<Option<(Route, Vec<u8>)>> = vec![None; data.len()];
    for chunk in order.chunks(batch) {
        let inputs: Vec<&[u8]> = chunk.iter().map(|&i| data[i].as_slice()).collect();
        let mut outputs: Vec<_> = (chunk.iter())
            .map(|&i| stream.alloc_zeros::<u8>(lens[i]).unwrap())
            .collect();
        let got = dec.decode_batch(&inputs, &mut outputs, stream);
        stream.synchronize().unwrap();
        for ((&i, r), o) in chunk.iter().zip(got).zip(&outputs) {
            let (_, route) = r.unwrap_or_else(|e| panic!("photo {i}: {e}"));
            out[i] = Some((route, stream.clone_dtoh(o).unwrap()));
        }
    }
    out.into_iter().map(Option::unwrap).collect()
}

#[test]
fn cached_memory_decodes_the_same_pixels_and_frees_nothing_once_warm() {
    let Some(ctx) = context() else {
        return;
    };
    let data = photos();
    let stream = ctx.new_stream().unwrap();
    let Some(mut library) = decoder(&ctx, NvjpegMemory::Library) else {
        return;
    };
    assert_eq!(library.nvjpeg_memory_stats(), None);
    let want = decode_all(&mut library, &stream, &data, 32);
    drop(library);

    let mut cached = decoder(&ctx, NvjpegMemory::Cached).unwrap();
    let first = decode_all(&mut cached, &stream, &data, 32);
    let warm = cached.nvjpeg_memory_stats().expect("the caches' counts");
    println!("after the first pass:\n{warm}");
    assert!(
        warm.device.requests > 0 && warm.pinned.requests > 0,
        "nvJPEG allocated nothing through the caches (does the library lack \
         nvjpegCreateExV2?): {warm:?}"
    );
    for (k, ((gr, gp), (wr, wp))) in first.iter().zip(&want).enumerate() {
        assert_eq!(gr, wr, "photo {k} routed differently");
        assert!(
            gp == wp,
            "photo {k}: pixels differ from nvJPEG's allocators'"
        );
    }
    assert!(
        first.iter().any(|(r, _)| *r == Route::NvjpegCuda),
        "no photo took the CUDA decoder"
    );
    // Two more passes in another batch size: the same buffers grow and shrink again.
    for pass in 0..2 {
        let again = decode_all(&mut cached, &stream, &data, 48);
        assert!(again == first, "pass {pass}: pixels or routes changed");
    }
    let after = cached.nvjpeg_memory_stats().unwrap();
    println!("after three passes:\n{after}");
    for (kind, w, a) in [
        ("device", warm.device, after.device),
        ("pinned", warm.pinned, after.pinned),
    ] {
        assert_eq!(a.requests, a.reused + a.fresh + a.failed, "{kind}: {a:?}");
        assert_eq!(a.failed, 0, "{kind}: {a:?}");
        assert_eq!(a.unknown_frees, 0, "{kind}: {a:?}");
        // Once warm, every free nvJPEG makes while decoding is kept, none given back.
        assert_eq!(
            a.released, w.released,
            "{kind}: blocks given back to CUDA while decoding warm: {a:?}"
        );
        assert!(
            a.idle_bytes <= a.peak_live_bytes.max(64 << 20),
            "{kind}: {a:?}"
        );
    }
}

#[test]
fn a_dropped_cached_decoder_gives_its_device_memory_back() {
    let Some(ctx) = context() else {
        return;
    };
    let data = photos();
    let stream = ctx.new_stream().unwrap();
    ctx.bind_to_thread().unwrap();
    let free_now = || result::mem_get_info().unwrap().0 as i64;
    // One decoder first: the context's own first-use allocations are not the caches'.
    let Some(mut dec) = decoder(&ctx, NvjpegMemory::Cached) else {
        return;
    };
    decode_all(&mut dec, &stream, &data, 64);
    drop(dec);
    let before = free_now();
    for round in 0..3 {
        let mut dec = decoder(&ctx, NvjpegMemory::Cached).unwrap();
        decode_all(&mut dec, &stream, &data, 64);
        let held = dec.nvjpeg_memory_stats().unwrap().device;
        drop(dec);
        stream.synchronize().unwrap();
        let lost = before - free_now();
        println!(
            "round {round}: peak {:.0} MiB through the caches, {:.1} MiB not back after the drop",
            held.peak_live_bytes as f64 / 1048576.0,
            lost as f64 / 1048576.0
        );
        // The driver rounds and keeps a little of its own; a cache that kept its blocks
        // would lose at least its peak each round.
        assert!(
            lost < (held.peak_live_bytes as i64 / 2).max(16 << 20),
            "round {round}: {lost} bytes not given back (peak {} in use)",
            held.peak_live_bytes
        );
    }
}
