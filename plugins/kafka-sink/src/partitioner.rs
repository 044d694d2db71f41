//! Which partition a record goes to: Kafka's default for keyed records
//! (`toPositive(murmur2(key)) % partitions`, as the Java client and
//! librdkafka's `murmur2` partitioner compute it), and the task's own
//! partition for records without a key.

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(first) = tail.first() {
        h ^= u32::from(*first);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record (Kafka's default partitioner).
pub fn for_key(key: &[u8], partitions: i32) -> i32 {
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    (positive % partitions.max(1) as u32) as i32
}

/// The partition of a record without a key: stable per task.
pub fn for_task(task_index: u32, partitions: i32) -> i32 {
    (task_index % partitions.max(1) as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // UtilsTest.testMurmur2 of the Apache Kafka Java client.
        for (key, want) in [
            (&b"21"[..], -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ] {
            assert_eq!(murmur2(key), want, "{}", String::from_utf8_lossy(key));
        }
        // librdkafka's unittest_murmurhashneutral2 (values after toPositive).
        for (key, want) in [
            (&b"kafka"[..], 1_348_980_580),
            (b"amqp", 767_747_138),
            (b"giberish123456789", 257_239_820),
        ] {
            assert_eq!(murmur2(key) & 0x7fff_ffff, want);
        }
    }

    #[test]
    fn partitions_are_in_range_and_stable() {
        // toPositive(-973932308) = 1173551340; % 16 = 12.
        assert_eq!(for_key(b"21", 16), 12);
        for p in 1..50 {
            let got = for_key(b"foobar", p);
            assert!((0..p).contains(&got));
            assert_eq!(got, for_key(b"foobar", p));
        }
        assert_eq!(for_task(5, 3), 2);
        assert_eq!(for_task(0, 0), 0);
    }
}
