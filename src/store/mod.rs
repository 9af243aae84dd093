//! Durable per-thread state: the schema-v1 document, the threads' conversations and each
//! caller's index of them, and the files that hold them.

pub mod conversations;
pub mod document;
pub mod files;
pub mod index;
pub mod sorted;
