//! What the user reads: the rows written as CSV or JSON Lines ([`writer`]), the SVG
//! timeline ([`plot`]), and the running totals and summary ([`report`]).

pub mod plot;
pub mod report;
pub mod writer;
