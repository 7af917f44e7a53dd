//! `stoker decode FILE`: decode one JPEG, print what its headers say and the
//! route that decoded it, optionally write the pixels as PNG. The first tool
//! to reach for when one image misbehaves.
#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use super::output::Shown;
use crate::loader::AutoChoice;
use anyhow::Context;
use stoker_decode::{
    cuda_context, probe, CpuDecoder, GpuDecoder, GpuDecoderOptions, Limits, WaitMode,
};

/// Which decoder to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// nvJPEG when a GPU and the library are present, else the CPU.
    Auto,
    /// The CPU backend (zune-jpeg, jpeg-decoder).
    Cpu,
    /// nvJPEG; fails when there is no GPU or no library.
    Nvjpeg,
}

/// Flags of `stoker decode`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The JPEG file.
    pub file: PathBuf,
    /// Write the decoded RGB pixels to this PNG file (replaced only once complete; a
    /// symlink, FIFO or device such as /dev/stdout is written through). `-` is stdout (a
    /// file named - is ./-). When the PNG goes to stdout (`-`, /dev/stdout, or the file
    /// stdout is redirected to), the report goes to stderr; a terminal is refused.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Decoder backend.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Pixel limit (width * height) enforced from the header (at least 1: 0 refused every
    /// image).
    #[arg(long, default_value_t = Limits::default().max_pixels,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pixels: u64,
    /// Decoding work limit (width * height * scans), checked from the headers (at least 1).
    #[arg(long, default_value_t = Limits::default().max_scan_work,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_scan_work: u64,
    /// Files larger than this are refused without being read, e.g. 64M, 1G, 1000000
    /// (bytes), as convert's flag of the same name.
    #[arg(long, default_value = "64M", value_parser = super::convert::parse_bytes)]
    pub max_file_size: u64,
    /// How the nvJPEG decoder waits for the GPU: auto, spin (poll on a core) or
    /// block (sleep until the driver wakes the thread). The CPU backend
    /// ignores it.
    #[arg(long, default_value = "auto", value_parser = clap::value_parser!(WaitMode))]
    pub gpu_waits: WaitMode,
}

/// Runs `stoker decode`: exit 0 when the image decodes, 1 when it does not.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let png_on_stdout = args
        .output
        .as_deref()
        .is_some_and(|p| p == Path::new(STDOUT) || super::output::is_stdout(p));
    if png_on_stdout && std::io::stdout().is_terminal() {
        // What was asked, not the image, is at fault: a usage error (it exited 1).
        let reason = format!(
            "-o {}: stdout is a terminal, where PNG bytes are no use; redirect stdout or name a file",
            args.output.as_deref().unwrap_or(Path::new(STDOUT)).shown()
        );
        return Ok(super::status::usage_error::<Args>("decode", reason));
    }
    if let Some(path) = args.output.as_deref().filter(|p| *p != Path::new(STDOUT)) {
        refuse_output(path, &args.file)?;
    }
    // A device, a FIFO or a huge file is refused before it is read.
    let data = crate::formats::read_input_file(&args.file, args.max_file_size)?;
    let limits = Limits {
        max_pixels: args.max_pixels,
        max_scan_work: args.max_scan_work,
    };
    let mut notes = Vec::new();
    let gpu = open_gpu(args.backend, limits, args.gpu_waits, &mut notes)?;
    let backend = if gpu.is_some() { "nvjpeg" } else { "cpu" };
    let waits = gpu.as_ref().map(GpuDecoder::wait_mode);
    if waits.is_none() && args.gpu_waits != WaitMode::Auto {
        notes.push(format!(
            "--gpu-waits {} applies to the nvJPEG decoder; this image was decoded on the CPU",
            args.gpu_waits
        ));
    }
    let header = probe(&data, &limits);
    if let Ok(info) = &header {
        // The decoders allocate what a decode needs infallibly: with --max-pixels raised, a
        // file of a few bytes can claim more than the memory this process may have, and the
        // failed allocation aborted it.
        let need = info.decode_bytes();
        if !stoker_decode::can_allocate(need) {
            anyhow::bail!(
                "{}: its {}x{} pixels need about {need} bytes to decode, more than this process could allocate; lower --max-pixels",
                args.file.shown(),
                info.width,
                info.height,
            );
        }
    }
    let decoded = match gpu {
        Some(mut g) => g.decode_to_host(&data),
        None => CpuDecoder::new(limits).decode_to_vec_routed(&data),
    };
    // Said first for a cut-off file: the CPU decoder calls it corrupt, nvJPEG may fill it in.
    let truncated = header.is_ok() && !crate::formats::jpeg_is_complete(&data);
    let ok = decoded.is_ok() && !truncated;
    // The report shares no stream with the PNG: `-o /dev/stdout | cat > x.png` got the
    // report's lines before and after the image.
    let mut out: Box<dyn Write> = if png_on_stdout {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(super::output::stdout())
    };
    if args.json {
        let v = serde_json::json!({
            "file": super::output::path_text(&args.file),
            "bytes": data.len(),
            "backend": backend,
            "info": header.as_ref().ok(),
            "route": decoded.as_ref().ok().map(|(_, r, _)| r),
            "gpu_waits": waits.map(WaitMode::name),
            "error": truncated.then(|| TRUNCATED.to_string()).or_else(|| decoded.as_ref().err().map(|e| e.to_string())),
            "truncated": truncated,
            "notes": notes,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(
            out,
            "file         {} ({} bytes)",
            args.file.shown(),
            data.len()
        )?;
        write_header(&mut out, &header)?;
        match &decoded {
            _ if truncated => writeln!(out, "decoded      no: {TRUNCATED}")?,
            Ok((_, route, _)) => match waits {
                Some(w) => writeln!(
                    out,
                    "decoded      yes, route {route} (backend {backend}, host waits {w})"
                )?,
                None => writeln!(out, "decoded      yes, route {route} (backend {backend})")?,
            },
            Err(e) => writeln!(out, "decoded      no: {e}")?,
        }
        for n in &notes {
            writeln!(out, "note         {n}")?;
        }
    }
    if let (Some(path), Ok((info, _, pixels))) = (&args.output, &decoded) {
        let png = |w: &mut dyn Write| encode_png(w, info.width, info.height, pixels);
        if path == Path::new(STDOUT) {
            super::output::write_stdout(|w| png(w))?;
        } else {
            // Appears only once complete: a full disk leaves neither a truncated image
            // nor a clobbered earlier one.
            super::output::write_file_atomically(path, |w| png(w))?;
        }
        if !args.json {
            writeln!(out, "wrote        {}", path.shown())?;
        }
    }
    out.flush()?;
    Ok(if ok {
        super::status::SUCCESS
    } else {
        super::status::FAILURE
    })
}

/// Refuses an `-o` path that cannot take the PNG, before anything is decoded: the input
/// file itself (`-o photo.jpg` replaced the JPEG with its PNG), a directory ("renaming
/// into DIR: Is a directory" after the report), a path below a file ("reading
/// file/x.png: Not a directory"), or one in a folder that does not exist.
fn refuse_output(output: &Path, input: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let id = |m: &std::fs::Metadata| (m.dev(), m.ino());
    let shown = output.shown();
    match std::fs::metadata(output) {
        Ok(m) if m.is_dir() => anyhow::bail!(
            "-o {shown}: is a directory; name the PNG file to write, e.g. {}",
            output.join("decoded.png").shown()
        ),
        Ok(m) if std::fs::metadata(input).is_ok_and(|i| m.is_file() && id(&i) == id(&m)) => {
            anyhow::bail!(
                "-o {shown}: is the input file {}, which the PNG would replace; name another file",
                input.shown()
            )
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            let file = output
                .ancestors()
                .skip(1)
                .find(|a| std::fs::metadata(a).is_ok_and(|m| !m.is_dir()))
                .unwrap_or(output);
            anyhow::bail!(
                "-o {shown}: {} is a file, not a directory, so nothing can be written in it",
                file.shown()
            )
        }
        // A new file in a folder that is not there: found after the decode, before.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let folder = output.parent().filter(|p| !p.as_os_str().is_empty());
            match folder {
                Some(dir) if !dir.is_dir() => anyhow::bail!(
                    "-o {shown}: the folder {} does not exist; make it first",
                    dir.shown()
                ),
                _ => Ok(()),
            }
        }
        // A new file, or one to replace; any other failure is the write's to report.
        _ => Ok(()),
    }
}

/// The text lines `stoker decode` prints for the image's header (or its error).
fn write_header(
    out: &mut impl Write,
    header: &Result<stoker_decode::ImageInfo, stoker_decode::DecodeError>,
) -> std::io::Result<()> {
    match &header {
        Ok(i) => {
            writeln!(out, "size         {}x{}", i.width, i.height)?;
            writeln!(out, "components   {} ({:?})", i.components, i.color_space)?;
            writeln!(out, "subsampling  {}", i.subsampling)?;
            writeln!(
                out,
                "coding       SOF{} {}{}{}, {}-bit, {} scan(s){}",
                i.sof,
                if i.progressive {
                    "progressive"
                } else {
                    "sequential"
                },
                if i.arithmetic {
                    ", arithmetic"
                } else {
                    ", Huffman"
                },
                if i.lossless { ", lossless" } else { "" },
                i.bit_depth,
                i.scans,
                if i.multi_scan_sequential {
                    " (not interleaved)"
                } else {
                    ""
                },
            )?;
            writeln!(out, "restart      {}", i.restart_interval)?;
            writeln!(
                out,
                "adobe        {}",
                i.adobe_transform
                    .map_or("-".to_string(), |t| format!("transform {t}"))
            )?;
            writeln!(
                out,
                "orientation  {}",
                i.exif_orientation
                    .map_or("-".to_string(), |o| o.to_string())
            )?;
            writeln!(
                out,
                "nvjpeg       hardware engines: {}, CUDA decoder: {}",
                yes(i.hardware_decodable()),
                yes(i.nvjpeg_decodable())
            )?;
        }
        Err(e) => writeln!(out, "header       error: {e}")?,
    }
    Ok(())
}

/// The nvJPEG decoder `backend` asks for (waiting as `waits` says), or `None` to decode
/// on the CPU. `auto` decides as the loader's `Device::Auto` does ([`AutoChoice`], for one process: local rank 0)
/// and notes why it fell back, in the loader's words.
fn open_gpu(
    backend: Backend,
    limits: Limits,
    waits: WaitMode,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<GpuDecoder>> {
    let open = |ordinal| {
        cuda_context(ordinal).and_then(|ctx| {
            GpuDecoder::new(
                &ctx,
                GpuDecoderOptions {
                    limits,
                    waits,
                    ..GpuDecoderOptions::default()
                },
            )
        })
    };
    let choice = match backend {
        Backend::Cpu => return Ok(None),
        Backend::Nvjpeg => return open(0).map(Some).context("--backend nvjpeg"),
        Backend::Auto => AutoChoice::for_local_rank(0),
    };
    let choice = match choice {
        AutoChoice::Gpu { ordinal, .. } => match open(ordinal) {
            Ok(decoder) => return Ok(Some(decoder)),
            Err(e) => AutoChoice::unavailable(format!("nvJPEG unavailable ({e})")),
        },
        cpu => cpu,
    };
    notes.extend(choice.fallback_note());
    Ok(None)
}

const TRUNCATED: &str = "truncated: the image's data ends before its end-of-image marker (FF D9)";

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The `-o` name that means stdout.
const STDOUT: &str = "-";

/// Writes `rgb` (`width` × `height` pixels) as a PNG into `w`.
fn encode_png(w: &mut dyn Write, width: u32, height: u32, rgb: &[u8]) -> anyhow::Result<()> {
    let mut enc = png::Encoder::new(w, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc
        .write_header()
        .map_err(io_of)
        .context("writing PNG header")?;
    w.write_image_data(rgb)
        .map_err(io_of)
        .context("writing PNG data")?;
    w.finish().map_err(io_of).context("finishing PNG")?;
    Ok(())
}

/// png's error as the `io::Error` it wraps when it is one: png 0.18 exposes it only
/// through the deprecated `Error::cause`, so a closed pipe (`-o - | head`) was not seen
/// as one and ended in an error message and status 1 instead of quietly.
fn io_of(e: png::EncodingError) -> anyhow::Error {
    match e {
        png::EncodingError::IoError(io) => io.into(),
        other => other.into(),
    }
}
