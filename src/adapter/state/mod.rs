//! What outlives a run: the thread registry, the replay logs, the kernel (what a run needs
//! from it, `upstream`) and the tasks it is still stopping (`winddown`), the shared handles.

pub(crate) mod policies;
pub mod replay;
pub(crate) mod shared;
pub mod threads;
pub(crate) mod upstream;
pub(crate) mod winddown;
