//! The decode stages' input: payloads read once into memory, spread over the
//! dataset, so decoding is measured without storage in the way.

use stoker_formats::{Dataset, Encoding};

use super::error::BenchError;

/// At most this many records are held in memory for the decode stages.
const SAMPLE_RECORDS: u64 = 4096;
/// At most this many payload bytes are held in memory for the decode stages.
const SAMPLE_BYTES: usize = 256 << 20;

/// Payloads held in memory for the decode stages, spread over the dataset.
pub(crate) struct Sample {
    pub payloads: Vec<Vec<u8>>,
    /// The limits the conversion accepted the records under, which the loader decodes
    /// with: a record above the decoder's default is timed, not dropped or failed.
    pub limits: stoker_decode::Limits,
    /// Records that failed to read (index, error), counted not fatal.
    pub bad: u64,
}

/// Reads up to [`SAMPLE_RECORDS`] JPEG payloads (and at most [`SAMPLE_BYTES`])
/// at evenly spread indices.
pub(crate) fn load_sample(ds: &Dataset) -> Result<Sample, BenchError> {
    let n = ds.len();
    let want = n.min(SAMPLE_RECORDS);
    let reader = ds.reader()?;
    let mut payloads = Vec::with_capacity(want as usize);
    let mut bytes = 0usize;
    let mut bad = 0u64;
    for k in 0..want {
        // Evenly spread indices, so every shard contributes.
        let index = k * n / want.max(1);
        match reader.get(index) {
            Ok(rec) if rec.header.encoding == Encoding::Jpeg => {
                // A payload with a bad CRC, or copied from a page of the shard that could
                // not be read (zeros), would be timed as a decode failure: counted as bad
                // instead, as the loader counts it.
                let payload = rec.payload.to_vec();
                if rec.check_crc().is_err() || reader.check_read(index).is_err() {
                    bad += 1;
                } else {
                    bytes += payload.len();
                    payloads.push(payload);
                }
            }
            Ok(_) => {}
            Err(_) => bad += 1,
        }
        if bytes >= SAMPLE_BYTES {
            break;
        }
    }
    Ok(Sample {
        payloads,
        bad,
        limits: ds.manifest().decode_limits(),
    })
}
