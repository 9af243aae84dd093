//! A run's life on its worker: the driver, its cell (one table for every actor), the stream tap
//! (replay log, disconnect grace), how it ends.

pub(crate) mod driver;
pub(crate) mod ending;
pub(crate) mod tee;
