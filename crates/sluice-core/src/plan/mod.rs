//! Logical plans (what the user wrote), physical plans (how it runs) and the lowering between.

pub mod device;
pub mod facts;
pub mod fuse;
pub mod insert_shard;
pub mod length;
pub mod logical;
pub mod lower;
pub mod objects;
pub mod physical;
pub mod rows;
pub mod slots;
#[cfg(test)]
pub(crate) mod test_ops;
