//! `[[targets.limits]]`: caps on the fast-tier bytes a target may hold, chosen by cgroup, pod
//! label or process name. Validation only; the daemon matches processes against them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::Problem;

/// One `[[targets.limits]]` table: which targets (exactly one of `cgroup`, `pod_label`, `name`)
/// and how much of the fast tier each of them may hold (exactly one of `fast_bytes`,
/// `fast_percent`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetLimit {
    /// A cgroup v2 directory, as in `[targets] cgroups`; processes of its descendants match too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// A Kubernetes pod label, `key=value`: the processes of the opted-in pods carrying it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_label: Option<String>,
    /// A process name pattern, as in `[targets] names`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Bytes of the fast tier each matching target may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_bytes: Option<u64>,
    /// Percent of the fast tier (its nodes' total memory) each matching target may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_percent: Option<f64>,
}

/// How much of the fast tier a limit allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LimitAmount {
    Bytes(u64),
    Percent(f64),
}

impl LimitAmount {
    /// The limit in bytes, on a fast tier of `fast_total_bytes`.
    #[must_use]
    pub fn bytes(self, fast_total_bytes: u64) -> u64 {
        match self {
            Self::Bytes(bytes) => bytes,
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "a share of a byte count, rounded down; validated to (0, 100]"
            )]
            Self::Percent(percent) => (fast_total_bytes as f64 * percent / 100.0) as u64,
        }
    }
}

impl std::fmt::Display for LimitAmount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(bytes) => write!(f, "{bytes} bytes"),
            Self::Percent(percent) => write!(f, "{percent} % of the fast tier"),
        }
    }
}

/// Which targets a `[[targets.limits]]` table is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSelector<'a> {
    /// Processes in this cgroup v2 directory or below it.
    Cgroup(&'a std::path::Path),
    /// Processes of the opted-in pods carrying the label `key=value`.
    PodLabel { key: &'a str, value: &'a str },
    /// Processes whose name matches this pattern.
    Name(&'a str),
}

impl std::fmt::Display for LimitSelector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cgroup(cgroup) => write!(f, "cgroup {}", cgroup.display()),
            Self::PodLabel { key, value } => write!(f, "pod label {key}={value}"),
            Self::Name(name) => write!(f, "name {name}"),
        }
    }
}

impl TargetLimit {
    /// The amount, once [`TargetLimit::problems`] found none.
    #[must_use]
    pub fn amount(&self) -> Option<LimitAmount> {
        match (self.fast_bytes, self.fast_percent) {
            (Some(bytes), None) => Some(LimitAmount::Bytes(bytes)),
            (None, Some(percent)) => Some(LimitAmount::Percent(percent)),
            _ => None,
        }
    }

    /// Which targets the table is for, once [`TargetLimit::problems`] found none.
    #[must_use]
    pub fn selector(&self) -> Option<LimitSelector<'_>> {
        match (&self.cgroup, &self.pod_label, &self.name) {
            (Some(cgroup), _, _) => Some(LimitSelector::Cgroup(cgroup)),
            (_, Some(label), _) => {
                let (key, value) = label.split_once('=')?;
                Some(LimitSelector::PodLabel {
                    key: key.trim(),
                    value: value.trim(),
                })
            }
            (_, _, Some(name)) => Some(LimitSelector::Name(name)),
            _ => None,
        }
    }

    /// What the limit matches, for logs and status: `cgroup db.slice`, `name redis*`.
    #[must_use]
    pub fn describe(&self) -> String {
        self.selector()
            .map_or_else(|| "nothing".to_owned(), |selector| selector.to_string())
    }

    /// What is wrong with the table at `targets.limits[index]`.
    #[must_use]
    pub fn problems(&self, index: usize) -> Vec<Problem> {
        let key = format!("targets.limits[{index}]");
        let mut problems = Vec::new();
        let mut problem = |message: String| {
            problems.push(Problem {
                key: key.clone(),
                message,
            });
        };
        let matchers = [
            self.cgroup.is_some(),
            self.pod_label.is_some(),
            self.name.is_some(),
        ];
        if matchers.iter().filter(|&&set| set).count() != 1 {
            problem(
                "give exactly one of cgroup, pod_label and name: which targets the limit is for"
                    .to_owned(),
            );
        }
        if let Some(cgroup) = &self.cgroup
            && cgroup
                .components()
                .any(|part| part == std::path::Component::ParentDir)
        {
            problem(format!(
                "cgroup {} must stay under /sys/fs/cgroup (no \"..\")",
                cgroup.display()
            ));
        }
        if let Some(label) = &self.pod_label
            && label
                .split_once('=')
                .is_none_or(|(key, _)| key.trim().is_empty())
        {
            problem(format!(
                "pod_label {label:?} must be key=value, e.g. \"tier=gold\""
            ));
        }
        match (self.fast_bytes, self.fast_percent) {
            (Some(0), None) => problem("fast_bytes must be at least 1".to_owned()),
            (None, Some(percent)) if !(percent > 0.0 && percent <= 100.0) => {
                problem(format!("fast_percent {percent} must be in (0, 100]"));
            }
            (Some(_), None) | (None, Some(_)) => {}
            _ => problem(
                "give exactly one of fast_bytes and fast_percent: how much of the fast tier \
                 each matching target may hold"
                    .to_owned(),
            ),
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(text: &str) -> TargetLimit {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_limit_names_one_kind_of_target_and_one_amount() {
        let ok = limit("cgroup = \"tenants/a\"\nfast_bytes = 1048576");
        assert!(ok.problems(0).is_empty());
        assert_eq!(ok.amount(), Some(LimitAmount::Bytes(1 << 20)));
        assert_eq!(ok.describe(), "cgroup tenants/a");
        let percent = limit("pod_label = \"tier=bronze\"\nfast_percent = 12.5");
        assert!(percent.problems(0).is_empty());
        assert_eq!(
            percent.selector(),
            Some(LimitSelector::PodLabel {
                key: "tier",
                value: "bronze"
            })
        );
        assert_eq!(percent.amount().unwrap().bytes(1000), 125);

        let messages = |text: &str| -> Vec<String> {
            limit(text)
                .problems(3)
                .into_iter()
                .map(|p| format!("{}: {}", p.key, p.message))
                .collect()
        };
        let both = messages("cgroup = \"a\"\nname = \"db\"\nfast_bytes = 1");
        assert_eq!(both.len(), 1);
        assert!(both[0].starts_with("targets.limits[3]: give exactly one of cgroup"));
        assert!(messages("name = \"db\"")[0].contains("exactly one of fast_bytes"));
        assert!(
            messages("name = \"db\"\nfast_bytes = 1\nfast_percent = 5.0")[0]
                .contains("exactly one of fast_bytes")
        );
        assert!(messages("name = \"db\"\nfast_percent = 150.0")[0].contains("(0, 100]"));
        assert!(messages("name = \"db\"\nfast_bytes = 0")[0].contains("at least 1"));
        assert!(messages("pod_label = \"gold\"\nfast_bytes = 1")[0].contains("key=value"));
        assert!(messages("cgroup = \"../x\"\nfast_bytes = 1")[0].contains("no \"..\""));
        assert!(toml::from_str::<TargetLimit>("cgroups = \"a\"").is_err());
    }
}
