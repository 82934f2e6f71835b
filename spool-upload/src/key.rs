//! Object keys: `<prefix>/v2/<spread>/date=<YYYY-MM-DD>/<pack_id>.pack`
//! for a pack alone, `<bundle id>.bundle` beside them for a bundle (the
//! crate docs say why the spread comes first).

use object_store::path::Path;
use spool_core::pack::PackId;

/// The object key of a pack under `prefix`: deterministic (a pack has one
/// key forever), unique (the id is), spread over 256 key ranges
/// ([`spread`]), listable by day within each (the date is the UTC day of
/// the id's timestamp).
pub fn object_key(prefix: &Path, id: &PackId) -> Path {
    let (y, m, d) = civil_from_days((id.timestamp_ms() / 86_400_000) as i64);
    let date = format!("date={y:04}-{m:02}-{d:02}");
    let file = format!("{}.pack", id.to_hex());
    prefix
        .clone()
        .join("v2")
        .join(spread(id).as_str())
        .join(date.as_str())
        .join(file.as_str())
}

/// The object key of a bundle under `prefix`, named by a fresh id of its
/// own (`bundle`: a [`PackId`] made for it, so its time and spread work as
/// a pack's): `<prefix>/v2/<spread>/date=<day>/<bundle>.bundle`. A
/// bundle's key is never reused: every PUT of one goes to a fresh key.
pub fn bundle_key(prefix: &Path, bundle: &PackId) -> Path {
    let pack = object_key(prefix, bundle);
    let mut parts: Vec<String> = pack.parts().map(|p| p.as_ref().to_owned()).collect();
    if let Some(last) = parts.last_mut() {
        *last = format!("{}{BUNDLE_SUFFIX}", bundle.to_hex());
    }
    Path::from_iter(parts)
}

/// How a bundle's key ends (a pack's ends `.pack`).
pub const BUNDLE_SUFFIX: &str = ".bundle";

/// The largest bundle spool writes: 1 GiB. A bundle is one PUT held whole
/// in memory, never more than [`crate::UploadConfig::bundle_limit`] bytes,
/// which is taken as at most this (the default is 8 MiB; S3 takes at most
/// 5 GiB in one PUT), so an object named like a bundle and larger than
/// this is not one spool wrote: a reader of bundles (`spool reindex`)
/// reports it instead of reading it.
pub const MAX_BUNDLE_BYTES: u64 = 1 << 30;

/// The key range a pack's object goes to: its id's last byte, which is
/// random (spool-core's `PackId`), as two hex digits, `00` to `ff`.
fn spread(id: &PackId) -> String {
    format!("{:02x}", id.0[15])
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout_is_fixed() {
        // 2024-02-29T23:59:59.999Z
        let id = PackId::with_timestamp(1_709_251_199_999);
        let key = object_key(&Path::from("a/b"), &id);
        let hex = id.to_hex();
        assert_eq!(
            key.as_ref(),
            format!("a/b/v2/{}/date=2024-02-29/{hex}.pack", &hex[30..])
        );
        let next = PackId::with_timestamp(1_709_251_200_000);
        let hex = next.to_hex();
        assert!(object_key(&Path::from(""), &next)
            .as_ref()
            .starts_with(&format!("v2/{}/date=2024-03-01/", &hex[30..])));
    }

    /// The packs of one millisecond, one node's or a fleet's, spread over
    /// all 256 key ranges, not the newest one.
    #[test]
    fn the_packs_of_one_instant_spread_over_every_key_range() {
        let ranges: std::collections::BTreeSet<String> = (0..4096)
            .map(|_| {
                let key = object_key(&Path::from("p"), &PackId::with_timestamp(1_800_000_000_000));
                key.as_ref().split('/').nth(2).unwrap().to_owned()
            })
            .collect();
        // 4096 draws miss one of 256 ranges with probability below 1e-4
        assert!(ranges.len() >= 250, "{} ranges", ranges.len());
        assert!(ranges
            .iter()
            .all(|r| r.len() == 2 && u8::from_str_radix(r, 16).is_ok()));
    }

    #[test]
    fn a_bundle_key_sits_beside_the_packs_of_its_day_and_range() {
        let id = PackId::with_timestamp(1_709_251_199_999);
        let hex = id.to_hex();
        assert_eq!(
            bundle_key(&Path::from("a/b"), &id).as_ref(),
            format!("a/b/v2/{}/date=2024-02-29/{hex}.bundle", &hex[30..])
        );
    }

    /// However large the settings, the uploader's bundles stay within what
    /// a reader of bundles trusts ([`MAX_BUNDLE_BYTES`]).
    #[test]
    fn no_bundle_is_larger_than_a_reader_trusts() {
        let cfg = crate::UploadConfig {
            bundle_bytes: u64::MAX,
            multipart_threshold: u64::MAX,
            max_in_flight_bytes: u64::MAX,
            ..Default::default()
        };
        assert_eq!(cfg.bundle_limit(), MAX_BUNDLE_BYTES);
        assert_eq!(crate::UploadConfig::default().bundle_limit(), 8 << 20);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
