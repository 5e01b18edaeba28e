//! The label sets of the families: what tells one series of a family from another.

use prometheus_client::encoding::EncodeLabelSet;

/// `{target}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabel {
    pub target: String,
}

/// `{target, tier}` with tier `fast` or `slow`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetTier {
    pub target: String,
    pub tier: String,
}

/// `{target, direction}` with direction `promote` or `demote`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetDirection {
    pub target: String,
    pub direction: String,
}

/// `{target, direction, granularity}` with granularity `4k`, `64k` or `2m`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Migrated {
    pub target: String,
    pub direction: String,
    pub granularity: String,
}

/// `{target, direction, result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PageResult {
    pub target: String,
    pub direction: String,
    pub result: String,
}

/// `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: String,
}

/// `{source}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

/// `{source, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceReason {
    pub source: String,
    pub reason: String,
}

/// `{node, tier}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeTier {
    pub node: String,
    pub tier: String,
}

/// `{node, kind}`: a node's cost of one kind of access (`read`, `write`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeKind {
    pub node: String,
    pub kind: String,
}

/// `{program}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgramLabel {
    pub program: String,
}

/// `{version}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabel {
    pub(super) version: String,
}
