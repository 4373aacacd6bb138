//! The command `monitor run` starts ([`child`]), and the signals forwarded to it or
//! turned into a stop of the profile ([`signals`]).

pub mod child;
pub mod signals;
