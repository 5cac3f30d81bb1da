//! strata_proto::batch: the RecordBatch v2 view the broker runs over every produced,
//! fetched, replicated, recovered and tiered batch. Input: bytes as they sit in a
//! produce request's records field or a segment file (zero or more concatenated
//! batches). Covers `batches()` framing, `RecordBatch::parse`, the header accessors,
//! `validate_crc`, `validate_for_append`, the bounded decompression of every codec (the
//! fuzzer sets the attribute bits, and each batch is also tried with its CRC fixed up so
//! it gets past the CRC), record iteration, and the offset/epoch/LogAppendTime rewrites.
//! The codecs are also fed the input directly, without a batch around it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_proto::Compression;
use strata_proto::compression::{decompress, decompressed_len};

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fuzz_target!(
    init: strata_fuzz::init(),
    |data: &[u8]| {
        strata_fuzz::check_batches(data);

        // The codecs on their own: the first byte picks one, the rest is its input.
        if let Some((&pick, input)) = data.split_first() {
            let codec = CODECS[pick as usize % CODECS.len()];
            let limit = strata_fuzz::DECOMPRESSED_CAP;
            let all = decompress(codec, input, limit);
            let len = decompressed_len(codec, input, limit);
            match (&all, &len) {
                (Ok(v), Ok(n)) => assert_eq!(v.len(), *n, "{codec:?}"),
                (Err(a), Err(b)) => assert_eq!(a, b, "{codec:?}"),
                _ => panic!("{codec:?}: decompress {all:?} but decompressed_len {len:?}"),
            }
            if let Ok(v) = &all {
                assert!(v.len() <= limit, "{codec:?} passed the cap: {}", v.len());
            }
        }
    }
);
