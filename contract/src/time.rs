//! Timestamps as the formats we write need them, from seconds since the epoch (no clock reads:
//! image dates come from `SOURCE_DATE_EPOCH`).

/// Seconds since the Unix epoch as RFC 3339 UTC (`1970-01-01T00:00:00Z`).
pub fn rfc3339(epoch: u64) -> String {
    let secs = epoch % 86_400;
    format!("{}T{:02}:{:02}:{:02}Z", date(epoch), secs / 3600, secs / 60 % 60, secs % 60)
}

/// Seconds since the Unix epoch as the UTC date (`1970-01-01`), as man pages are dated.
pub fn date(epoch: u64) -> String {
    // Civil-from-days, after Howard Hinnant, <https://howardhinnant.github.io/date_algorithms.html>.
    let days = epoch / 86_400;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_714_564_800), "2024-05-01T12:00:00Z");
        assert_eq!(super::date(1_764_720_000), "2025-12-03");
    }
}
