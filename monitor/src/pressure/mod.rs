//! Memory pressure: the watcher's readings ([`watch`]), each row's share of them
//! ([`apportion`]), and the thrashing verdict drawn from the rows ([`verdict`]).

pub mod apportion;
pub mod verdict;
pub mod watch;
