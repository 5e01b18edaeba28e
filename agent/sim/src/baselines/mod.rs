//! The published policies memtide is compared against, one file each. Each file's doc says
//! what it models and where the rule comes from (anchors.md, the seeds digest).

pub mod damon;
pub mod hemem;
pub mod memtis;
pub mod static_place;
pub mod tpp;
