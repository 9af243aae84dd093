//! Durable per-thread state: the schema-v1 document and the files that hold it.

pub mod document;
pub mod files;
pub mod sorted;
