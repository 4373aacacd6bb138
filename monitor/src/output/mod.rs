//! What the user reads: the rows written as CSV or JSON Lines ([`writer`]), the SVG
//! timeline ([`plot`]), the running totals and the summary ([`report`]), and why they
//! could not be written ([`error`]).

pub mod error;
pub mod plot;
pub mod report;
pub mod writer;
