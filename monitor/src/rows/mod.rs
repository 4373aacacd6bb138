//! From the ring to rows: the consumer side of the protocol ([`source`]) and the rows
//! made of its samples ([`row`]).

pub mod row;
pub mod source;
