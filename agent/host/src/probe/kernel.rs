//! The running kernel's version, where a source's usefulness depends on it.
//!
//! AMD IBS op samples carry the data address (`PERF_SAMPLE_ADDR`) only since Linux 6.1: the
//! IBS memory-profiling series (commits cb2bb85f7ed8 "perf/x86/amd: Support PERF_SAMPLE_ADDR",
//! 7c10dd0a88b1 "…DATA_SRC", 6b2ae4952ef8 "…WEIGHT", 5b26af6d2b78 "…PHY_ADDR", merged for
//! v6.1) added `perf_ibs_parse_ld_st_data()` to `arch/x86/events/amd/ibs.c`, which sets
//! `data->addr` from `MSR_AMD64_IBSDCLINAD` for loads and stores with a valid linear address.
//! Before it the IRQ handler set only the precise IP and, on request, the raw MSR dump
//! (`PERF_SAMPLE_RAW`), which the BPF program does not read: every sample's address is 0.

use std::{fmt, str::FromStr};

/// Where the kernel's release string is read from.
pub const OSRELEASE: &str = "proc/sys/kernel/osrelease";

/// The first kernel whose IBS op samples carry the data address.
pub const IBS_DATA_ADDRESS_SINCE: KernelVersion = KernelVersion { major: 6, minor: 1 };

/// A kernel's major and minor version (`6.12` of `6.12.0-1-amd64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A release string that does not start with `MAJOR.MINOR`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel release {0:?} does not start with MAJOR.MINOR")]
pub struct BadRelease(pub String);

impl FromStr for KernelVersion {
    type Err = BadRelease;

    /// Parses the start of a release string: `6.1.0-rc3`, `5.15.0-91-generic`, `6.12+deb13`.
    fn from_str(release: &str) -> Result<Self, Self::Err> {
        let bad = || BadRelease(release.to_owned());
        let number = |part: Option<&str>| -> Result<u32, BadRelease> {
            let digits: String = part
                .ok_or_else(bad)?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().map_err(|_| bad())
        };
        let mut parts = release.trim().split('.');
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        Ok(Self { major, minor })
    }
}

/// Why IBS op sampling is of no use on a kernel of `release`, or `None` when it is (or the
/// version cannot be told, which is said elsewhere: refusing then would hide a working source).
#[must_use]
pub fn ibs_refusal(release: &str) -> Option<String> {
    let version: KernelVersion = release.parse().ok()?;
    (version < IBS_DATA_ADDRESS_SINCE).then(|| {
        format!(
            "kernel {release} is older than {IBS_DATA_ADDRESS_SINCE}: its IBS op samples carry no \
             data address (PERF_SAMPLE_ADDR for ibs_op arrived in Linux {IBS_DATA_ADDRESS_SINCE}, \
             arch/x86/events/amd/ibs.c perf_ibs_parse_ld_st_data); upgrade the kernel or use \
             another source"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_strings_of_distributions_parse() {
        for (release, major, minor) in [
            ("6.1.0-rc3", 6, 1),
            ("5.15.0-91-generic", 5, 15),
            ("6.12.48+deb13-amd64", 6, 12),
            ("6.18.0\n", 6, 18),
            ("4.19.0-27-cloud-amd64", 4, 19),
            ("6.8", 6, 8),
        ] {
            assert_eq!(
                release.parse::<KernelVersion>(),
                Ok(KernelVersion { major, minor }),
                "{release}"
            );
        }
        for bad in ["", "six.one", "6", "v6.1", "unknown"] {
            assert!(bad.parse::<KernelVersion>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ibs_is_refused_before_6_1_with_the_reason_and_kept_from_6_1_on() {
        let refusal = ibs_refusal("6.0.19-generic").expect("6.0 has no IBS data address");
        assert!(refusal.contains("6.0.19-generic"), "{refusal}");
        assert!(refusal.contains("no data address"), "{refusal}");
        assert!(ibs_refusal("5.15.0-91-generic").is_some());
        assert_eq!(ibs_refusal("6.1.0"), None);
        assert_eq!(ibs_refusal("6.12.48+deb13-amd64"), None);
        assert_eq!(ibs_refusal("10.0"), None);
        // An unreadable version does not hide the source.
        assert_eq!(ibs_refusal("unknown"), None);
    }
}
