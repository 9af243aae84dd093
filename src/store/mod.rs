//! Durable per-thread state: the schema-v1 document, the threads' conversations and each
//! caller's index of them (feature `threads`), and the files that hold them.

#[cfg(feature = "threads")]
pub mod conversations;
pub mod document;
pub mod files;
#[cfg(feature = "threads")]
pub mod index;
pub mod sorted;
