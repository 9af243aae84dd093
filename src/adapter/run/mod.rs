//! A run's life on its worker: the driver, its cell (one table for every actor), the stream tap
//! (replay log, disconnect grace), how it ends and winds down, what it needs from the kernel.

pub(crate) mod driver;
pub(crate) mod ending;
pub(crate) mod tee;
pub(crate) mod upstream;
pub(crate) mod winddown;
