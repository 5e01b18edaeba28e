//! Command-line values as people write them: sizes with unit suffixes, numbers checked against
//! their range with the range in the message. Shared by every `memtide` subcommand, so `64M`
//! means the same wherever a size is taken.

/// An error that is the caller's to fix (a bad value, a missing input): `memtide` exits 2 on
/// it, as on the command-line errors clap reports itself.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A size in bytes: plain bytes (`4096`) or a number with a binary unit, `K`, `M`, `G`, `T`
/// (also `KiB`, `MiB`, `GiB`, `TiB`, `KB`, `MB`, `GB`, `TB`, any case: all powers of 1024, as
/// memory is sized), with an optional fraction (`1.5G`) that must come to whole bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "{text:?} is not a size: bytes, or a number with K, M, G or T (KiB, MiB, GiB, TiB), e.g. 64M"
            ));
        }
    };
    let number = number.replace('_', "");
    let unit_bytes = 1u64 << shift;
    let not_a_size =
        || format!("{text:?} is not a size: bytes, or a number with K, M, G or T, e.g. 64M");
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(unit_bytes)
            .ok_or_else(|| format!("{text}: more than {} bytes", u64::MAX));
    }
    let value: f64 = number.parse().map_err(|_| not_a_size())?;
    let bytes = value * unit_bytes as f64;
    if !bytes.is_finite() || bytes.fract() != 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text}: not a whole number of bytes"));
    }
    // Exact: the product is a whole number below 2^64.
    Ok(bytes as u64)
}

/// A fraction in `[0, 1]`.
pub fn parse_fraction(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number; give a fraction in [0, 1], e.g. 0.25"))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{text} is outside the accepted range [0, 1]"))
    }
}

/// A whole number of at least 1.
pub fn parse_positive_u32(text: &str) -> Result<u32, String> {
    match text.trim().parse::<i64>() {
        Ok(value) if value >= 1 => u32::try_from(value)
            .map_err(|_| format!("{text} is outside the accepted range [1, {}]", u32::MAX)),
        Ok(_) => Err(format!(
            "{text} is outside the accepted range [1, {}]",
            u32::MAX
        )),
        Err(_) => Err(format!("{text:?} is not a whole number (at least 1)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_plain_bytes_and_binary_units() {
        for (text, bytes) in [
            ("4096", 4096),
            ("0", 0),
            ("64M", 64 << 20),
            ("64m", 64 << 20),
            ("64MiB", 64 << 20),
            ("64 MB", 64 << 20),
            ("4K", 4096),
            ("4kib", 4096),
            ("2G", 2 << 30),
            ("1.5G", 3 << 29),
            ("1T", 1 << 40),
            ("1_000", 1000),
            ("512B", 512),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn sizes_that_are_not_sizes_say_what_is_accepted() {
        for text in [
            "",
            "M",
            "64X",
            "-1",
            "1.5",
            "0.1K",
            "abc",
            "18446744073709551616",
        ] {
            let error = parse_size(text).expect_err(text);
            assert!(
                error.contains("size") || error.contains("bytes"),
                "{text}: {error}"
            );
        }
        assert!(parse_size("64X").unwrap_err().contains("64M"));
        assert!(parse_size("16777216T").is_err(), "overflows u64");
    }

    #[test]
    fn fractions_and_counts_name_their_range() {
        assert_eq!(parse_fraction("0.25"), Ok(0.25));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        let error = parse_fraction("-1").unwrap_err();
        assert!(error.contains("[0, 1]"), "{error}");
        assert!(parse_fraction("1.5").unwrap_err().contains("[0, 1]"));
        assert!(parse_fraction("NaN").is_err());
        assert_eq!(parse_positive_u32("64"), Ok(64));
        assert!(parse_positive_u32("0").unwrap_err().contains("[1, "));
        assert!(parse_positive_u32("-3").unwrap_err().contains("[1, "));
        assert!(parse_positive_u32("x").is_err());
    }
}
