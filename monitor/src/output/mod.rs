//! What the user reads: the rows written as CSV, JSON Lines or a table ([`writer`],
//! [`table`]) after what was profiled ([`metadata`]), the SVG timeline ([`plot`]), the
//! running totals and the live line ([`totals`]), the summary as text or JSON where
//! asked ([`summary`]), where the faults were ([`attribution`]), and why they could not
//! be written ([`error`]).

pub mod attribution;
pub mod error;
pub mod metadata;
pub mod plot;
pub mod summary;
pub mod table;
pub mod totals;
pub mod writer;
